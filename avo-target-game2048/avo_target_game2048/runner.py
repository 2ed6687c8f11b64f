"""The player-side runner: runs in the player's own process, never in the harness.

Started as ``python -S runner.py`` with the candidate directory as its working directory
(``-S``: no site-packages, so the player sees the standard library only). It imports
``agent.py`` from there and answers the harness over the pipe:

    runner -> harness   ``ready``                   once agent.py is imported
    harness -> runner   ``<16 hex digits> <score>``  one line per move; hex digit i is the
                                                     exponent of cell i in reading order
    runner -> harness   ``U`` | ``D`` | ``L`` | ``R``  the chosen move
    runner -> harness   ``! <what went wrong>``      when agent.py failed (then it exits)

End of input means the evaluation is over. Whatever the agent prints goes to stderr (fd 1
is pointed there), so nothing it prints can be mistaken for a reply. This file uses no
code from the harness package: it is untrusted territory like agent.py itself.
"""

import os
import sys
import traceback


def _grid(hexboard: str) -> list:
    cells = [int(ch, 16) for ch in hexboard]
    return [[(1 << e) if e else 0 for e in cells[r * 4:r * 4 + 4]] for r in range(4)]


def main() -> int:
    # The protocol gets a private copy of the pipe; fd 1 (print) now goes to stderr.
    proto = os.dup(1)
    os.dup2(2, 1)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.getcwd())

    def send(text: str) -> None:
        os.write(proto, (text + "\n").encode())

    try:
        import agent  # noqa: PLC0415 - the candidate, imported from the working directory

        choose = agent.choose_move
        if not callable(choose):
            raise TypeError("agent.choose_move is not a function")
    except BaseException as exc:  # an import error, a SystemExit, a missing function
        traceback.print_exc()
        send(f"! agent.py failed to load: {type(exc).__name__}: {exc}"[:500])
        return 1
    send("ready")
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        hexboard = line.split()[0].decode()
        try:
            reply = choose(_grid(hexboard))
        except BaseException as exc:
            traceback.print_exc()
            send(f"! choose_move raised {type(exc).__name__}: {exc}"[:500])
            return 1
        send(str(reply)[:40].replace("\n", " "))


if __name__ == "__main__":
    sys.exit(main())
