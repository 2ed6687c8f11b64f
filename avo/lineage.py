"""P_t as git history: the work tree's own repository, on GitPython.

Objects, trees, commits, refs and the copy into the private backup are written in-process
(the loose-object writer under the default ``GitCmdObjectDB``; git's lock-file protocol for
refs); objects are read in-process too, loose or packed, each hashed to its id, and what that
reader leaves to git goes through one persistent ``git cat-file --batch`` per repository
(GitPython's). Only what git alone does well runs as a process: ``git add -A`` (ignore
rules, through a temporary index, whose trees are then written in-process), ``git diff``, and
the reset after a rejection (``git read-tree --reset -u`` from the snapshot's own index, or
``reset --hard`` and ``clean``). GitPython is imported on first use, so
commands that never touch the lineage do not pay for it.

avo snapshots a candidate as a git *tree* (through a temporary index of its own, so neither
the agent's index nor another avo command's is touched), evaluates exactly that tree, and
commits exactly that tree plus the score file, built from tree objects without any index and
verified before it is tagged: what is measured is what enters the lineage, whatever the
agent edits meanwhile. Read-only questions (is work/ dirty?) write nothing in the run.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from avo.errors import AvoError
from avo.git_packs import MAX_OBJECT, Damaged, TooHard, object_id, packed_ids, read_packed
from avo.programs import program
from avo.regular_files import NotRegularFile, linked_on_the_way, open_regular, own_folder, own_subfolders, set_aside

BRANCH = "main"
META_DIR = ".avo"
# Hooks and signing are the agent's or the user's, not the harness's: never run them.
_CONFIG = [
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "user.name=avo",
    "-c", "user.email=avo@localhost",
    "-c", "core.autocrlf=false",
    "-c", "advice.detachedHead=false",
    # The agent may write work/.git/config: no file-system monitor program runs for us.
    "-c", "core.fsmonitor=false",
    # Nothing may write beside the index or objects it was asked to write (shared split
    # indexes, untracked caches, automatic gc and maintenance), least of all a reader.
    "-c", "core.splitIndex=false",
    "-c", "core.untrackedCache=false",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    # avo reads and writes its temporary indexes in-process, in the version it wrote them.
    "-c", "index.version=2",
    "-c", "feature.manyFiles=false",
    # No reflog: git appends to one through any link the agent puts at its name (into .avo/).
    "-c", "core.logAllRefUpdates=false",
]
# work/.git/config as avo keeps it: what `git init` writes, nothing an agent added.
_OWN_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
_GITLINK, _SYMLINK = "160000", "120000"


class CandidateError(AvoError):
    """The candidate tree cannot be evaluated as it stands (a failed candidate, not an avo error)."""


class ForeignGitDir(AvoError):
    """work/.git is not a plain repository directory of avo's: git must not run through it."""


@dataclass(frozen=True)
class CommitInfo:
    """One commit as read from a repository: id, tree, parents, full message."""

    sha: str
    tree: str
    parents: tuple[str, ...]
    message: str


_NO_USER_CONFIG = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git_env() -> dict[str, str]:
    """The environment of every git avo runs: no ``GIT_*`` variable of the caller's, and no
    configuration but avo's own (``_CONFIG``) and the repository's (which avo rewrites): the
    user's ``~/.gitconfig`` and the system's can name filters and hooks, which would run as avo
    (round seven of the red team: a clean filter named by work/.gitattributes and defined in
    the global configuration ran three times during a submit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_NO_USER_CONFIG, GIT_TERMINAL_PROMPT="0")
    return env


def _git(git_dir: Path, args: Sequence[str], *, work: Path | None = None, index: Path | None = None,
         stdin: bytes | None = None, check: bool = True, readonly: bool = False) -> bytes:
    """Run git on exactly ``git_dir`` (never a repository found by searching upwards)."""
    env = git_env()
    env["GIT_DIR"] = str(git_dir)
    if work is not None:
        env["GIT_WORK_TREE"] = str(work)
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    # The agent may write refs/replace/: a replacement would make git read its commit (its
    # tree) wherever avo names a version, as the in-process reader never does.
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    if readonly:
        env["GIT_OPTIONAL_LOCKS"] = "0"  # no opportunistic index refresh written back
    proc = subprocess.run([program("git"), *_CONFIG, *args], cwd=work or git_dir, env=env, input=stdin,
                          capture_output=True)
    if check and proc.returncode != 0:
        raise AvoError(
            f"git {' '.join(args[:3])} failed in {work or git_dir}: "
            f"{proc.stderr.decode('utf-8', 'replace').strip()}"
        )
    return proc.stdout


def foreign_git_dir(work: Path) -> str | None:
    """Why ``work/.git`` is not a plain repository directory avo may write into, if it is not.

    A symlink or a ``gitdir:`` file would send every write into another repository; a
    ``commondir`` file or a linked ``objects``/``refs`` folder would send some of them.
    """
    git_dir = work / ".git"
    try:
        st = git_dir.lstat()
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"work/.git is a symlink to {os.readlink(git_dir)!r}"
    if not stat.S_ISDIR(st.st_mode):
        return "work/.git is a file, not a directory (a `gitdir:` link to another repository?)"
    if (git_dir / "commondir").exists():
        return "work/.git has a commondir file: it borrows another repository's objects and refs"
    for sub in ("objects", "refs"):
        if (git_dir / sub).is_symlink():
            return f"work/.git/{sub} is a symlink to {os.readlink(git_dir / sub)!r}"
    # A linked folder further down (refs/heads into avo's backup, objects/ab into its objects)
    # sends avo's writes there.
    try:
        linked = next((e.name for e in os.scandir(git_dir / "objects") if e.is_symlink()), None)
    except OSError:
        linked = None
    if linked is not None:
        return f"work/.git/objects/{linked} is a symlink to {os.readlink(git_dir / 'objects' / linked)!r}"
    for folder, dirs, _ in os.walk(git_dir / "refs"):
        for name in dirs:
            if os.path.islink(os.path.join(folder, name)):
                link = Path(folder, name)
                return f"work/.git/{link.relative_to(git_dir)} is a symlink to {os.readlink(link)!r}"
    return None


_GIT_READS = (".gitignore", ".gitattributes")  # what git opens in every folder of the work tree


def refuse_waiting_files(work: Path) -> None:
    """Raise unless what git opens in ``work/.git`` (its top, ``info/``, ``objects/info/``,
    its ``commit-graphs/``, ``objects/pack/``, the reflogs ``git reset`` appends to) is a
    regular file or absent: git opens them blocking, so a pipe there (a same-user agent's
    ``mkfifo``) kept every git process, and with it ``avo submit`` and ``avo status``, waiting
    for good (a pack index, the multi-pack-index or a commit-graph chain: any git process that
    looks an object up; a reflog: ``avo revert``)."""
    git_dir = work / ".git"
    objects = git_dir / "objects"
    for folder in (git_dir, git_dir / "info", objects / "info", objects / "info" / "commit-graphs", objects / "pack",
                   git_dir / "logs", git_dir / "logs" / "refs" / "heads"):
        try:
            with os.scandir(folder) as it:
                entries = [e for e in it if not e.is_dir()]  # follows links, as git does
        except OSError:
            continue
        for entry in entries:
            try:
                _refuse_waiting(entry.path, entry.stat().st_mode)
            except OSError:
                continue  # a dangling link: git reads nothing there


def _walk_work(work: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` of the work tree, its ``.git`` left out."""
    for root, dirs, files in os.walk(work):
        if root == str(work):
            dirs[:] = [d for d in dirs if d != ".git"]
        yield root, dirs, files


def refuse_waiting_ignores(work: Path) -> None:
    """:func:`refuse_waiting_files` for every ``.gitignore`` and ``.gitattributes`` under
    ``work``, which ``git add`` and ``git status`` open in each folder they list (the .git
    files are checked before every git process)."""
    for root, dirs, files in _walk_work(work):
        for name in _GIT_READS:
            if name in files or name in dirs:
                path = os.path.join(root, name)
                try:
                    _refuse_waiting(path, os.stat(path).st_mode)
                except OSError:
                    continue  # a dangling link: git reads nothing there


def _refuse_waiting(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise AvoError(f"{path} is not a regular file (a pipe, a device or a socket): git would wait on it "
                       "for good. Remove it and run the command again.")


class _Answers:
    """The reader's output taken in large chunks: thousands of small objects (a run's commits)
    cost one read per megabyte, not two per object. Reads only what git has written, so it
    never waits past the last answer."""

    def __init__(self, stream: IO[bytes]):
        self.stream, self.buf, self.pos = stream, b"", 0

    def _more(self) -> None:
        chunk = self.stream.read1(1 << 20)  # type: ignore[attr-defined]
        if not chunk:
            raise AvoError("git cat-file stopped answering")
        self.buf, self.pos = self.buf[self.pos:] + chunk, 0

    def line(self) -> bytes:
        while (end := self.buf.find(b"\n", self.pos)) < 0:
            self._more()
        out, self.pos = self.buf[self.pos:end], end + 1
        return out

    def take(self, n: int) -> bytes:
        if len(self.buf) - self.pos < n:  # gather the rest once: a large blob is copied once, not per chunk
            parts, got = [self.buf[self.pos:]], len(self.buf) - self.pos
            while got < n:
                chunk = self.stream.read1(max(1 << 20, n - got))  # type: ignore[attr-defined]
                if not chunk:
                    raise AvoError("git cat-file stopped answering")
                parts.append(chunk)
                got += len(chunk)
            self.buf, self.pos = b"".join(parts), 0
        out, self.pos = self.buf[self.pos:self.pos + n], self.pos + n
        return out

    def finish(self) -> None:
        if self.pos != len(self.buf):  # never: git answers exactly what was asked
            raise AvoError("git cat-file answered more than was asked")


class _Objects:
    """One repository's object store as git serves it: reads through one persistent
    ``git cat-file --batch`` (GitPython's ``Git.get_object_data``) of what :func:`read_any`
    leaves to git, writes in-process into its loose objects."""

    def __init__(self, git_dir: Path):
        # GitPython runs `git version` when it is imported, with $GIT_PYTHON_GIT_EXECUTABLE or the
        # first git on the caller's PATH: name the system's (programs.py).
        os.environ["GIT_PYTHON_GIT_EXECUTABLE"] = program("git")
        from git.cmd import Git  # GitPython costs ~120 ms to import: only where the lineage is read
        from git.db import GitCmdObjectDB

        self.git_dir = git_dir
        Git.GIT_PYTHON_GIT_EXECUTABLE = program("git")  # also where git was imported before
        self.cmd = Git(str(git_dir))
        # Exactly this repository, no replacement objects, no borrowed stores, no locks taken.
        self.cmd.update_environment(
            GIT_DIR=str(git_dir), GIT_OBJECT_DIRECTORY=str(git_dir / "objects"), GIT_ALTERNATE_OBJECT_DIRECTORIES="",
            GIT_NO_REPLACE_OBJECTS="1", GIT_OPTIONAL_LOCKS="0", GIT_CONFIG_COUNT="0", GIT_CONFIG_PARAMETERS="",
            GIT_NAMESPACE="", GIT_TERMINAL_PROMPT="0", **_NO_USER_CONFIG)
        self.db = GitCmdObjectDB(str(git_dir / "objects"), self.cmd)
        self.lock = threading.Lock()  # one request at a time on the reader's pipe (the MCP server's threads)

    def read_git(self, spec: str) -> tuple[str, str, bytes] | None:
        """``(id, type, content)`` of the object ``spec`` names, through git's reader, or ``None``."""
        if not spec or "\n" in spec:
            return None
        try:
            with self.lock:
                # git's reader hands the object over whole: never one larger than a run holds (an
                # alternate store's or a planted pack's "tree" of gigabytes of zeros, a few MB stored).
                if self.cmd.get_object_header(spec)[2] > MAX_OBJECT:
                    return None
                sha, kind, _size, data = self.cmd.get_object_data(spec)
        except ValueError:  # "<spec> missing" (or ambiguous): the reader stays in step
            return None
        return _checked(os.fsdecode(sha), os.fsdecode(kind), data)

    def read_many(self, specs: Sequence[str]) -> list[tuple[str, str, bytes] | None]:
        """``(id, type, content)`` (or ``None``) for many specs: full ids stored loose read
        in-process, the rest pipelined through git's reader (one round trip)."""
        here: dict[int, tuple[str, str, bytes] | None] = {}
        for i, spec in enumerate(specs):
            if _is_sha(spec):
                decided, got = _read_here(self.git_dir, spec, packs=False)  # packed ones: one pipelined round trip
                if decided:
                    here[i] = got
        rest = [i for i in range(len(specs)) if i not in here]
        answers = iter(self._read_many_git([specs[i] for i in rest]) if rest else [])
        return [here[i] if i in here else next(answers) for i in range(len(specs))]

    def _read_many_git(self, specs: Sequence[str]) -> list[tuple[str, str, bytes] | None]:
        if len(specs) < 8:
            return [self.read_git(s) for s in specs]
        with self.lock:
            proc = self.cmd._get_persistent_cmd("cat_file_all", "cat_file", batch=True)
            stdin, stdout = proc.stdin, proc.stdout
            assert stdin is not None and stdout is not None
            clean = [s if s and "\n" not in s else "0" * 40 for s in specs]
            # A thread writes the requests while this one reads the answers: neither pipe can fill.
            def send() -> None:
                try:
                    stdin.write("".join(f"{s}\n" for s in clean).encode())
                    stdin.flush()
                except (OSError, ValueError):  # the reader was stopped (a failed batch): no answers wanted
                    pass

            writer = threading.Thread(target=send, daemon=True)
            writer.start()
            out: list[tuple[str, str, bytes] | None] = []
            answers = _Answers(stdout)
            for _ in clean:
                try:
                    header = answers.line().decode("utf-8", "replace").split()
                    # "<spec> missing" is three words too when the spec holds a space (a hand-edited
                    # run.json's commit id): only a size makes an answer with a body.
                    if len(header) != 3 or not _is_sha(header[0]) or not header[2].isdigit():
                        out.append(None)
                        continue
                    size = int(header[2])
                    out.append(_checked(header[0], header[1], answers.take(size + 1)[:size]))
                except BaseException:
                    # Answers left unread would be handed to the next request: start a new reader.
                    self.cmd.clear_cache()
                    raise
            writer.join()
            answers.finish()
        return out

    def write(self, kind: str, data: bytes) -> str:
        """Store one object; its id."""
        from gitdb.base import IStream
        from gitdb.db import LooseObjectDB

        # GitCmdObjectDB.store runs `git hash-object` per object; its loose base writes in-process.
        return LooseObjectDB.store(self.db, IStream(kind.encode(), len(data), io.BytesIO(data))).hexsha.decode()

    def close(self) -> None:
        self.cmd.clear_cache()


_STORES: dict[str, tuple[tuple[int, int], _Objects]] = {}


def _objects(git_dir: Path) -> _Objects:
    """The cached store of ``git_dir``; a new one if the directory was replaced since. A
    repository that is a link, or in a folder that is one (``work/``, ``.avo/``), is refused:
    avo's writes there would land where it leads."""
    problem = linked_on_the_way(git_dir.parent.parent, git_dir)
    if problem:
        raise AvoError(f"{problem}: avo reads and writes a repository only in its own folder, never through a link")
    key = str(git_dir)
    try:
        ident = (os.stat(git_dir).st_ino, os.stat(git_dir / "objects").st_ino)
    except OSError as exc:
        raise AvoError(f"{git_dir} is not a git repository: {exc.strerror}") from None
    cached = _STORES.get(key)
    if cached and cached[0] == ident:
        return cached[1]
    if cached:
        cached[1].close()
    _refuse_odd_objects(git_dir / "objects")
    store = _Objects(git_dir)
    _STORES[key] = (ident, store)
    return store


def _refuse_odd_objects(objects: Path) -> None:
    """Raise unless every loose object and pack file is a regular file: git opens them
    blocking and following links, so a FIFO there would stop its reader (and avo) forever.
    Once per reader started: the listing gives each entry's type without a stat."""
    try:
        with os.scandir(objects) as top:
            folders = [e.path for e in top
                       if (len(e.name) == 2 or e.name == "pack") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return  # git says what is wrong with it
    for folder in folders:
        try:
            with os.scandir(folder) as it:
                odd = next((e.path for e in it if not e.is_file(follow_symlinks=False)), None)
        except OSError:
            continue
        if odd is not None:
            raise AvoError(f"{odd} is not a regular file (a pipe, a device, a folder or a link): git would wait "
                           "on it or read it forever; move it away and run the command again")


def _forget(git_dir: Path) -> None:
    cached = _STORES.pop(str(git_dir), None)
    if cached:
        cached[1].close()


def _parse_commit(sha: str, data: bytes) -> CommitInfo:
    head, _, message = data.partition(b"\n\n")
    tree, parents = "", []
    for line in head.split(b"\n"):
        if line.startswith(b"tree "):
            tree = line[5:].decode()
        elif line.startswith(b"parent "):
            parents.append(line[7:].decode())
    return CommitInfo(sha, tree, tuple(parents), message.decode("utf-8", "replace"))


def check_entry_name(name: str, where: str) -> None:
    """Refuse a tree entry name git itself never writes (``git add`` cannot make one): written
    into a folder, ``..``, a ``/`` or ``.git`` would reach outside it or into a repository.
    Such a tree can only be crafted, e.g. in a forged backup that a migrant is read from."""
    if name in ("", ".", "..") or "/" in name or name.lower() == ".git":
        raise CandidateError(f"the tree holds an entry named {name!r} under {where or 'its top'}: git never "
                             "writes such a name, so the tree was crafted; it is not taken")


def _tree_entries(data: bytes) -> list[tuple[str, str, str, str]]:
    """``(mode, type, sha, name)`` of a raw tree object."""
    out, pos = [], 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        mode = data[pos:space].decode()
        mode = mode.zfill(6)  # git stores trees as "40000"
        sha = data[nul + 1:nul + 21].hex()
        kind = "tree" if mode == "040000" else "commit" if mode == _GITLINK else "blob"
        out.append((mode, kind, sha, os.fsdecode(data[space + 1:nul])))
        pos = nul + 21
    return out


def _index_files(index: Path) -> list[tuple[str, bytes, bytes]] | None:
    """``(mode, sha, path)`` of every entry of a version 2 or 3 index with nothing but stage-0
    files (what ``git add -A`` writes into a fresh index), in the index's order; ``None`` for
    anything else (a conflict, an intent-to-add or sparse entry, another version, a damaged
    file), which ``git write-tree`` then handles or refuses as it always has."""
    try:
        with os.fdopen(open_regular(index, follow_links=False), "rb") as fh:
            data = fh.read()
    except (OSError, NotRegularFile):
        return None
    if len(data) < 32 or data[:4] != b"DIRC" or hashlib.sha1(data[:-20]).digest() != data[-20:]:
        return None
    version, count = int.from_bytes(data[4:8], "big"), int.from_bytes(data[8:12], "big")
    if version not in (2, 3):
        return None
    out: list[tuple[str, bytes, bytes]] = []
    pos, last = 12, b""
    try:
        for _ in range(count):
            mode = int.from_bytes(data[pos + 24:pos + 28], "big")
            sha = data[pos + 40:pos + 60]
            flags = int.from_bytes(data[pos + 60:pos + 62], "big")
            start = pos + 62
            if flags & 0x4000:  # extended flags: intent-to-add or skip-worktree
                return None
            if flags & 0x3000:  # a stage other than 0: an unmerged path
                return None
            end = data.index(b"\0", start)
            if (flags & 0xFFF) != 0xFFF and end - start != flags & 0xFFF:
                return None
            path = data[start:end]
            # Strictly sorted, no empty name: git add writes nothing else, and git write-tree
            # refuses (or writes otherwise) a path out of order, twice or with an empty name.
            if path <= last or path.startswith(b"/") or path.endswith(b"/") or b"//" in path:
                return None
            last = path
            pos += (end - pos + 8) & ~7  # entries are NUL-padded to a multiple of 8 bytes
            kind = mode >> 12
            octal = {0o10: f"{mode:o}", 0o12: _SYMLINK, 0o16: _GITLINK}.get(kind)
            if octal not in ("100644", "100755", _SYMLINK, _GITLINK):
                return None
            out.append((octal, sha, path))
    except ValueError:
        return None
    paths = {path for _m, _s, path in out}
    # A file that is also a folder of another path ("a" and "a/b"): git write-tree refuses it.
    if any(path[:i] in paths for path in paths for i in range(len(path)) if path[i] == 0x2F):
        return None
    return out


def _tree_bytes(entries: Sequence[tuple[str, str, str, str]]) -> bytes:
    """A raw tree object, entries in git's order (a folder sorts as if its name ended in /)."""
    def key(e: tuple[str, str, str, str]) -> bytes:
        return os.fsencode(e[3]) + (b"/" if e[1] == "tree" else b"")
    return b"".join(f"{'40000' if m == '040000' else m} ".encode() + os.fsencode(n) + b"\0" + bytes.fromhex(s)
                    for m, _k, s, n in sorted(entries, key=key))


def _resolve_ref(git_dir: Path, ref: str, depth: int = 0) -> str | None:
    """The id a ref (``HEAD``, ``refs/...``) holds, read in-process (loose, then packed-refs)."""
    if depth > 5 or ".." in ref.split("/"):
        return None
    value = _small_file(git_dir / ref)
    if value.startswith("ref: "):
        return _resolve_ref(git_dir, value[5:].strip(), depth + 1)
    if value:
        return value if _is_sha(value) else None
    return _packed_refs(git_dir).get(ref)


_REFS_FILE_MAX = 1 << 24  # packed-refs of a run with 100k versions holds ~6 MB


def _small_file(path: Path) -> str:
    """A ref file's text, stripped; ``""`` if it is missing, unreadable, not a regular file (a
    pipe there would keep a plain ``open`` waiting for good) or larger than any git writes (a
    sparse file of 100 GB read whole was a MemoryError in every submit)."""
    try:
        with os.fdopen(open_regular(path), "rb") as fh:
            data = fh.read(_REFS_FILE_MAX + 1)
        return data.decode().strip() if len(data) <= _REFS_FILE_MAX else ""
    except (OSError, NotRegularFile, UnicodeDecodeError):
        return ""


def _packed_refs(git_dir: Path) -> dict[str, str]:
    """The refs in ``packed-refs`` (name to id); none when there is no file avo can read (a
    lookup falls back to nothing, as for a missing loose ref; rewriting the file says why)."""
    try:
        raw = _read_packed_refs(git_dir)
    except AvoError:
        return {}
    out = {}
    for line in raw.splitlines():
        sha, _, name = line.partition(" ")
        if line[:1] not in ("#", "^") and _is_sha(sha):
            out[name] = sha
    return out


def _is_version_tag(name: str) -> bool:
    return name[:1] == "v" and name[1:].isdigit() and name.isascii()


_PACKED_HEADER = "# pack-refs with: peeled fully-peeled sorted \n"


# A vN tag's line in packed-refs, with the peeled id git writes after an annotated tag.
_VERSION_TAG_LINE = re.compile(r"^([0-9a-f]{40}) refs/tags/(v[0-9]+)\n(?:\^[^\n]*\n)?", re.MULTILINE)
# What git's check-ref-format refuses in a name (control characters, space, ~ ^ : ? * [ \, "..",
# "@{", "//", a component starting with "." or ending in ".lock", a name ending in "/" or ".").
_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(/|$)|[/.]$")


def _read_packed_refs(git_dir: Path) -> str:
    """``packed-refs`` exactly as git reads it (``""`` if there is none); bytes that are not
    UTF-8 (git allows them in a name) kept as they are, to be written back unchanged."""
    path = git_dir / "packed-refs"
    try:
        with os.fdopen(open_regular(path), "rb") as fh:
            data = fh.read(_REFS_FILE_MAX + 1)
    except FileNotFoundError:
        return ""  # none (or a dangling link): git reads no packed refs, and avo writes the file
    except NotRegularFile:  # named, not replaced: the agent's packed refs may be behind it
        raise AvoError(f"{path} is not a regular file (a pipe, a device or a folder): git would wait on it or "
                       "fail; move it away and run the command again") from None
    except OSError as exc:
        raise AvoError(f"{path} cannot be read ({exc}): move it away and run the command again") from None
    if len(data) > _REFS_FILE_MAX:
        raise AvoError(f"{path} is larger than {_REFS_FILE_MAX >> 20} MiB, more than avo reads: the refs in it are "
                       "not avo's (a run's tags take ~60 bytes each); delete refs from it with `git update-ref -d`, "
                       "or move it away, and run the command again (avo writes its tags back)")
    return data.decode("utf-8", "surrogateescape")


def _split_packed_refs(raw: str) -> tuple[str, list[tuple[str, str]], dict[str, str], bool]:
    """``packed-refs`` as its header, the entries that are not avo's ``vN`` tags (each with its
    peeled line, verbatim, keyed by the ref's name), the ``vN`` tags (name to id), and whether
    the file is exactly as :meth:`Lineage.set_tags` writes it (avo's tags only, in git's order).

    The tags are matched by one regular expression over the whole file (10,000 of them in
    ~2 ms); only the agent's own entries, usually none, are parsed line by line. A line git
    would refuse (a header of another kind, a blank line, a carriage return, a name git does
    not allow) is not written back: git stops reading every ref at such a line."""
    found = _VERSION_TAG_LINE.findall(raw)
    tags = {name: sha for sha, name in found}
    header = _PACKED_HEADER
    kept: list[tuple[str, str]] = []
    first = raw[:raw.find("\n") + 1]
    if first.startswith("# pack-refs with:") and raw.endswith("\n") and raw.count("\n") == len(found) + 1:
        names = [f"refs/tags/{name}" for _sha, name in found]  # the header and avo's tags only
        return first, kept, tags, all(a < b for a, b in zip(names, names[1:], strict=False))  # ASCII: bytes' order
    peelable = False  # the line before was a kept entry without its peeled id yet
    for line in _VERSION_TAG_LINE.sub("", raw).split("\n"):
        if line.startswith("# pack-refs with:") and not kept:
            header = line + "\n"
        elif line.startswith("^") and peelable and _is_sha(line[1:]):
            kept[-1] = (kept[-1][0], kept[-1][1] + line + "\n")
            peelable = False
        else:
            sha, _, name = line.partition(" ")
            peelable = _is_sha(sha) and name.startswith("refs/") and not _BAD_REF.search(name)
            if peelable:
                kept.append((name, line + "\n"))
    return header, kept, tags, False


def _loose_version_tags(tags: Path) -> dict[str, Path]:
    """The loose ``vN`` tag files under ``refs/tags`` (name to path); other tags are the agent's.

    ``refs/tags`` must be work/.git's own folder: through a link avo would remove files
    elsewhere (every ``vN`` it finds is folded into packed-refs and deleted)."""
    try:
        mode = os.lstat(tags).st_mode
    except FileNotFoundError:
        return {}
    if not stat.S_ISDIR(mode):
        raise AvoError(f"{tags} is not a folder (a link, a file or a pipe): git keeps tags there and avo writes "
                       "nothing through a link; remove it and run the command again (avo writes its tags back)")
    with os.scandir(tags) as it:
        return {e.name: Path(e.path) for e in it if _is_version_tag(e.name) and not e.is_dir(follow_symlinks=False)}


def _is_sha(value: str) -> bool:
    return len(value) == 40 and not value.strip("0123456789abcdef")  # no per-character loop: 10,000 tags


def _write_file_atomic(path: Path, data: bytes, *, inside: Path | None = None) -> None:
    """git's lock-file protocol: ``path.lock`` created exclusively, then renamed over ``path``.

    ``inside``: the repository ``path`` belongs to; a link on the way from the folder that holds
    it (a ``refs/heads`` linked into avo's backup, a ``work/`` or ``.avo/lineage.git`` linked
    elsewhere) is refused, or the write would land where it leads.
    """
    if inside is not None:
        problem = linked_on_the_way(inside.parent.parent, path.parent)
        if problem:
            raise AvoError(f"{problem}: avo writes {path.name} only inside the repository {inside}, never "
                           "through a link")
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise AvoError(f"{lock} exists: another git process is writing {path.name} (or one was killed; "
                       "remove the .lock file if no git command is running)") from None
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(lock, path)


def _fresh_folder(folder: Path) -> int:
    """A descriptor of ``folder``, made empty: whatever is at its name is set aside first, and
    its parent is reached as a folder of avo's own (``rejected/``: never through a link)."""
    parent = own_folder(folder.parent, 1)
    try:
        try:
            os.stat(folder.name, dir_fd=parent, follow_symlinks=False)
            set_aside(folder.name, dir_fd=parent)
        except FileNotFoundError:
            pass
        return own_subfolders(os.dup(parent), [folder.name], folder.parent)
    finally:
        os.close(parent)


def _has_loose(objects: Path, sha: str) -> bool:
    return (objects / sha[:2] / sha[2:]).is_file()


def _put(store: _Objects, objects: Path, sha: str, kind: str, data: bytes) -> None:
    """Store an object copied from another repository, checking it arrives as the same id."""
    if not _has_loose(objects, sha) and store.write(kind, data) != sha:
        raise AvoError(f"object {sha[:12]} changed while it was copied")


def set_branch(git_dir: Path, sha: str) -> None:
    """Point ``git_dir``'s branch at ``sha`` (a commit it holds), forward or back: `avo recover`
    moving avo's backup back past commits it does not adopt."""
    if read_any(git_dir, sha) is None:
        raise AvoError(f"{sha[:12]} is not in {git_dir}")
    _write_file_atomic(git_dir / "refs" / "heads" / BRANCH, f"{sha}\n".encode(), inside=git_dir)


def read_commits(git_dir: Path, tip: str) -> list[CommitInfo]:
    """The first-parent chain ending at ``tip`` in ``git_dir``, oldest first."""
    out: list[CommitInfo] = []
    spec: str | None = tip
    seen: set[str] = set()
    while spec:
        if len(out) == 64:  # a long chain: list it in one process, read it in one round trip
            ids = _git(git_dir, ["rev-list", "--first-parent", spec, "--"], readonly=True).decode().split()
            for got in _objects(git_dir).read_many(ids):
                if got is None or got[1] != "commit":
                    break
                out.append(_parse_commit(got[0], got[2]))
            break
        got = read_any(git_dir, spec)
        if got is None or got[1] != "commit" or got[0] in seen:
            break
        seen.add(got[0])
        info = _parse_commit(got[0], got[2])
        out.append(info)
        spec = info.parents[0] if info.parents else None
    if not out:
        raise AvoError(f"{tip[:12]} is not a commit in {git_dir}")
    return out[::-1]


def commit_message(git_dir: Path, sha: str) -> str | None:
    """The message of commit ``sha`` in ``git_dir``, or ``None``."""
    got = read_any(git_dir, sha)
    return _parse_commit(got[0], got[2]).message if got and got[1] == "commit" else None


def read_any(git_dir: Path, spec: str) -> tuple[str, str, bytes] | None:
    """``(id, type, content)`` of the object ``spec`` names in ``git_dir``, or ``None``.

    A full id is read in-process (:func:`_read_here`), as is ``id:path``, walked object by
    object: read-only commands then pay neither GitPython's import nor a `git cat-file`.
    Only what this reader leaves to git goes to git's reader.
    """
    if not _is_sha(spec):
        rev, sep, path = spec.partition(":")
        if sep and _is_sha(rev) and path:
            return _read_path(git_dir, rev, path)
        return _objects(git_dir).read_git(spec)
    decided, got = _read_here(git_dir, spec)
    return got if decided else _objects(git_dir).read_git(spec)


def _read_here(git_dir: Path, sha: str, *, packs: bool = True) -> tuple[bool, tuple[str, str, bytes] | None]:
    """``(decided, object)``: the object ``sha`` (a full id) read in-process, loose (avo writes
    its objects loose) or packed (a run seeded from a bundle), hashed to its id.

    ``decided`` is False where git's reader must answer: no loose file and no pack holds it
    here (an alternate store may), or a pack holds it in a form :mod:`avo.git_packs` leaves to
    git (or, with ``packs`` False, any object not stored loose). An object that does not hash
    to its id is damaged (or forged): ``(True, None)``, never git's copy of it.
    """
    try:
        # Never a link, a pipe or a device: /dev/zero would be read forever, a pipe waited on.
        fd = open_regular(git_dir / "objects" / sha[:2] / sha[2:], follow_links=False)
    except FileNotFoundError:
        if not packs:
            return False, None
        try:
            packed = read_packed(git_dir / "objects", sha)
        except Damaged:
            return True, None
        except TooHard:
            return False, None
        return packed is not None, packed
    except (OSError, NotRegularFile):
        return True, None
    with os.fdopen(fd, "rb") as fh:
        try:
            raw = _inflate_loose(fh)
        except (OSError, zlib.error):
            return True, None
    if raw is None:  # larger than any object a run holds; git's reader would hand it over whole
        return True, None
    header, _, data = raw.partition(b"\0")
    kind, _, size = header.decode("ascii", "replace").partition(" ")
    if hashlib.sha1(raw).hexdigest() != sha or size != str(len(data)):
        return True, None
    return True, (sha, kind, data)


def _inflate_loose(fh: IO[bytes]) -> bytes | None:
    """A loose object's ``<kind> <size>\\0<content>``, inflated to one byte past the size its
    header gives (more is damage, for the hash to refuse), never to the end of what the file
    would inflate to (the agent's zip bomb under a version's id, or a sparse file); ``None``
    for a header giving more than :data:`~avo.git_packs.MAX_OBJECT` (the work limits' default
    for all of work/): ``git cat-file`` would announce that size, and GitPython read it whole."""
    unzip, raw, want = zlib.decompressobj(), bytearray(), 64  # the header first: "<kind> <size>\0"
    sized = False
    while len(raw) < want and not unzip.eof:
        data = unzip.unconsumed_tail or fh.read(1 << 16)
        got = unzip.decompress(data, want - len(raw))
        if not data and not got:
            break  # truncated: the hash refuses it
        raw += got
        if not sized and (nul := raw.find(b"\0")) >= 0:
            size = bytes(raw[:nul]).partition(b" ")[2]
            if size.isdigit() and int(size) > MAX_OBJECT:
                return None
            sized, want = True, nul + 2 + (int(size) if size.isdigit() else 0)
    return bytes(raw)


def _read_path(git_dir: Path, rev: str, path: str) -> tuple[str, str, bytes] | None:
    """``rev:path`` (``rev`` a commit, tag or tree id) walked object by object with
    :func:`read_any`, each hashed to its id, so a run's scores file is read in-process too.

    Never git's own ``rev:path``: git walks the trees without checking them, so a loose tree
    or commit rewritten under its old name would hand out another file."""
    got = read_any(git_dir, rev)
    for _ in range(5):  # peel annotated tags
        if got is None or got[1] != "tag":
            break
        target = got[2][7:47].decode("ascii", "replace") if got[2].startswith(b"object ") else ""
        got = read_any(git_dir, target) if _is_sha(target) else None
    if got is None or got[1] not in ("commit", "tree"):
        return None
    if got[1] == "commit":
        tree = _parse_commit(got[0], got[2]).tree
        got = read_any(git_dir, tree) if _is_sha(tree) else None
    for name in path.split("/"):
        if got is None or got[1] != "tree" or not name:
            return None
        try:
            entries = _tree_entries(got[2])
        except (ValueError, UnicodeDecodeError):  # not a tree git wrote (crafted): nothing there
            return None
        entry = next((sha for _m, _k, sha, n in entries if n == name), None)
        if entry is None or not _is_sha(entry):
            return None
        got = read_any(git_dir, entry)
    return got


def ref_of(git_dir: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``git_dir``, or ``None``."""
    sha = _resolve_ref(git_dir, ref) if ref == "HEAD" or ref.startswith("refs/") else ref
    for _ in range(5):  # peel annotated tags
        got = read_any(git_dir, sha) if sha else None
        if got is None:
            return None
        if got[1] == "commit":
            return got[0]
        if got[1] != "tag" or not got[2].startswith(b"object "):
            return None
        sha = got[2][7:47].decode()
    return None


def object_ids(git_dir: Path, specs: Sequence[str]) -> list[str | None]:
    """The object id each ``rev:path`` spec names in ``git_dir`` (``None`` where none)."""
    if not specs:
        return []
    # ``rev:dir/file`` is read as the tree ``rev:dir`` and looked up there: the blob itself
    # (a growing score file) never crosses the pipe.
    asked = []
    for spec in specs:
        rev, colon, path = spec.partition(":")
        asked.append(f"{rev}:{path.rpartition('/')[0]}" if colon else rev)
    ids: list[str | None] = []
    for spec, got in zip(specs, _objects(git_dir).read_many(asked), strict=True):
        name = spec.partition(":")[2].rpartition("/")[2] if ":" in spec else None
        if got is None or got[1] not in ("blob", "tree", "commit"):
            ids.append(None)
        elif name is None:
            ids.append(got[0])
        elif got[1] != "tree":
            ids.append(None)
        else:
            ids.append(next((sha for _m, _k, sha, n in _tree_entries(got[2]) if n == name), None))
    return ids


def read_object(git_dir: Path, spec: str) -> bytes | None:
    """The content of a blob (``rev:path`` or an id) in ``git_dir``, or ``None``."""
    return read_objects(git_dir, [spec])[0]


def read_objects(git_dir: Path, specs: Sequence[str]) -> list[bytes | None]:
    """The contents of blobs (``rev:path`` or ids) in ``git_dir``, through the persistent reader."""
    if not specs:
        return []
    return [got[2] if got and got[1] == "blob" else None for got in _objects(git_dir).read_many(specs)]


def _checked(sha: str, kind: str, data: bytes) -> tuple[str, str, bytes] | None:
    """The object as git handed it out, if its content hashes to its id; ``None`` otherwise.

    `git cat-file` does not check: a loose file the agent replaced would be read under the
    old name.
    """
    return (sha, kind, data) if object_id(kind, data) == sha else None


def blob_id(content: bytes | memoryview) -> str:
    """The id git gives a blob with ``content`` (no repository needed)."""
    return object_id("blob", content)


def _content_digest(path: bytes) -> bytes:
    """sha1 of a file's bytes, never following a link; random bytes when it cannot be read, or
    is larger than any file a run holds (a sparse file of 100 GB in work/.git, beyond the work
    limits, was hashed for minutes twice per submit): its signature then equals no other."""
    try:
        fd = open_regular(path, follow_links=False)
    except (OSError, NotRegularFile):
        return os.urandom(16)
    if os.fstat(fd).st_size > MAX_OBJECT:
        os.close(fd)
        return os.urandom(16)
    h = hashlib.sha1()
    try:
        with os.fdopen(fd, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return os.urandom(16)
    return h.digest()


class Lineage:
    """The git repository in a run's ``work/``."""

    def __init__(self, work: Path, private_index: Path):
        self.work = work
        self.private_index = private_index

    def git(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
            check: bool = True, readonly: bool = False) -> str:
        return self.git_bytes(*args, index=index, stdin=stdin, check=check,
                              readonly=readonly).decode("utf-8", "replace")

    def git_bytes(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
                  check: bool = True, readonly: bool = False) -> bytes:
        # Name the repository outright: if an agent deletes work/.git, git must fail here
        # rather than find (and write into) a repository that holds the runs directory; if
        # it links work/.git elsewhere, git must not run at all.
        linked = linked_on_the_way(self.work.parent, self.work)
        if linked:  # its clean and reset would change whatever work/ leads to (.avo/, a folder of the user's)
            raise AvoError(f"{linked}: avo runs git only in the run's own work/ folder, never through a link. "
                           "Put the run's work/ folder back (the link was not followed)")
        foreign = foreign_git_dir(self.work)
        if foreign:
            raise ForeignGitDir(f"{foreign}; avo will not run git through it. The next avo command that "
                                "changes the run (eval, submit, revert, recover) moves it aside and "
                                "restores the lineage from avo's private backup.")
        refuse_waiting_files(self.work)
        self._own_config()
        if not readonly:  # a command that may move a ref
            self._drop_reflogs()
        return _git(self.work / ".git", args, work=self.work, index=index, stdin=stdin, check=check,
                    readonly=readonly)

    def _own_config(self) -> None:
        """Put back avo's own ``work/.git/config`` if the agent changed it: a filter, a diff or
        fetch command, an include written there runs as avo, outside the sandbox, inside avo's
        own git calls (``git add -A`` runs every clean filter). ``-c`` cannot name them all."""
        path = self.git_dir / "config"
        if not self.git_dir.is_dir():
            return
        try:
            with os.fdopen(open_regular(path, follow_links=False, why="replaced"), "rb") as fh:
                same = fh.read(len(_OWN_CONFIG) + 1) == _OWN_CONFIG
        except (OSError, AvoError):
            same = False
        if not same:
            _write_file_atomic(path, _OWN_CONFIG, inside=self.git_dir)

    @property
    def git_dir(self) -> Path:
        return self.work / ".git"

    def objects(self) -> _Objects:
        """The repository's store, after the same check as every git call (never a foreign .git)."""
        self._refuse_foreign()
        return _objects(self.git_dir)

    def _refuse_foreign(self) -> None:
        if foreign_git_dir(self.work):
            self.git_bytes("--version")  # raises ForeignGitDir with the full explanation

    def _read(self, spec: str, kind: str) -> bytes:
        got = read_any(self.git_dir, spec)
        if got is None or got[1] != kind:
            raise AvoError(f"git cannot read {kind} {spec} in {self.work}")
        return got[2]

    # -- set-up ---------------------------------------------------------------------------
    def init(self) -> None:
        _forget(self.git_dir)
        self.git("init", "-q", "-b", BRANCH)

    def displace_git_dir(self, aside: Path) -> Path:
        """Rename work/.git (whatever it is) into ``aside``, never following or deleting it."""
        aside.mkdir(parents=True, exist_ok=True)
        dest = aside / f"work.git-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        _forget(self.git_dir)
        os.rename(self.work / ".git", dest)
        return dest

    # -- snapshots ------------------------------------------------------------------------
    @contextmanager
    def _temp_index(self, where: Path | None = None) -> Iterator[Path]:
        """A fresh index file no other command (nor a second call of this one) shares."""
        folder = where if where is not None else self.private_index.parent
        folder.mkdir(parents=True, exist_ok=True)
        index = folder / f"{self.private_index.name}-{os.getpid()}-{uuid.uuid4().hex}"
        try:
            yield index
        finally:
            index.unlink(missing_ok=True)
            index.with_name(index.name + ".lock").unlink(missing_ok=True)

    def snapshot_tree(self, keep_index: Path | None = None) -> str:
        """The tree of the work tree as ``git add -A`` would commit it (a temporary index).

        The index is filled from HEAD in-process; ``git add -A`` (ignore rules, the work
        tree's files) runs as a process, and the trees of the index it leaves are written
        in-process (one process fewer per submit than ``git write-tree``). ``keep_index``:
        where to leave that index (its files' stat data), for :meth:`reset_hard`.
        """
        refuse_waiting_ignores(self.work)
        head = self.head()
        with self._temp_index() as index:
            if head is not None:
                self._write_index(index, self.tree_of(head))
            self.git("add", "-A", "--", ".", index=index)
            files = _index_files(index)
            # An index git wrote in a form this reader leaves to git: git writes its trees.
            tree = self._tree_of_files(files) if files is not None else self.git("write-tree", index=index).strip()
            if keep_index is not None:
                os.replace(index, keep_index)
            return tree

    def _tree_of_files(self, files: Sequence[tuple[str, bytes, bytes]]) -> str:
        """Write the trees of ``(mode, sha, path)`` files, sorted by path as in an index, as
        ``git write-tree`` would; the top tree's id."""
        # One pass over the sorted paths: a stack of open folders, each closed (its tree
        # written) when the next path leaves it.
        stack: list[tuple[bytes, list[tuple[str, str, str, str]]]] = [(b"", [])]
        for mode, sha, path in files:
            *folders, name = path.split(b"/")
            depth = 0
            while depth < len(folders) and depth + 1 < len(stack) and stack[depth + 1][0] == folders[depth]:
                depth += 1
            while len(stack) > depth + 1:
                folder, entries = stack.pop()
                stack[-1][1].append(("040000", "tree", self._mktree(entries), os.fsdecode(folder)))
            stack.extend((folder, []) for folder in folders[depth:])
            kind = "commit" if mode == _GITLINK else "blob"
            stack[-1][1].append((mode, kind, sha.hex(), os.fsdecode(name)))
        while len(stack) > 1:
            folder, entries = stack.pop()
            stack[-1][1].append(("040000", "tree", self._mktree(entries), os.fsdecode(folder)))
        return self._mktree(stack[0][1])

    def _walk(self, tree: str, prefix: str = "") -> Iterator[tuple[str, str, str]]:
        """``(mode, sha, path)`` of every file (blob, link, gitlink) under ``tree``."""
        seen: set[str] = set()
        for mode, kind, sha, name in self._entries(tree):
            check_entry_name(name, prefix)
            if name in seen:  # git reads the first, a checkout writes both: two files under one name
                raise CandidateError(f"the tree holds two entries named {name!r} under {prefix or 'its top'}: "
                                     "git never writes such a tree, so it was crafted; it is not taken")
            seen.add(name)
            if kind == "tree":
                yield from self._walk(sha, f"{prefix}{name}/")
            else:
                yield mode, sha, prefix + name

    def _write_index(self, index: Path, tree: str) -> None:
        """An index holding ``tree`` (what ``git read-tree`` writes), written in-process."""
        from git.index.fun import write_cache
        from git.index.typ import BaseIndexEntry, IndexEntry

        entries = [IndexEntry.from_base(BaseIndexEntry((int(mode, 8), bytes.fromhex(sha), 0, path)))
                   for mode, sha, path in self._walk(tree)]
        entries.sort(key=lambda e: os.fsencode(e.path))
        buf = io.BytesIO()
        try:
            write_cache(entries, buf)
        except UnicodeEncodeError:  # a file name that is not UTF-8: let git write it
            self.git("read-tree", tree, index=index)
            return
        _write_file_atomic(index, buf.getvalue())

    def _entries(self, tree: str) -> list[tuple[str, str, str, str]]:
        """``(mode, type, sha, name)`` of a tree's top level."""
        return _tree_entries(self._read(tree, "tree"))

    def _mktree(self, entries: list[tuple[str, str, str, str]]) -> str:
        return self.objects().write("tree", _tree_bytes(entries))

    def code_tree(self, tree: str) -> str:
        """``tree`` without avo's folder at its top (``.avo/``, the score file): the candidate's code
        as its evaluation sees it (the snapshot leaves that folder out), so the same code has one
        id before and after a version's score file lands in work/. A ``.avo`` that is not a folder
        stays: it fails the candidate, so it is part of what was measured."""
        entries = self._entries(tree)
        kept = [e for e in entries if not (e[3] == META_DIR and e[1] == "tree")]
        return tree if len(kept) == len(entries) else self._mktree(kept)

    def tree_with_file(self, base_tree: str, rel: str, content: bytes) -> str:
        """``base_tree`` with one file set to ``content``, built from tree objects (no index).

        No index is involved, so no other process can slip its own tree in between.
        """
        return self._with_blob(base_tree, rel, self.objects().write("blob", content))

    def _with_blob(self, base_tree: str, rel: str, blob: str) -> str:
        head, _, rest = rel.partition("/")
        current = self._entries(base_tree)
        entries = [e for e in current if e[3] != head]
        if rest:
            sub = next((e for e in current if e[3] == head and e[1] == "tree"), None)
            base_sub = sub[2] if sub else self._mktree([])
            entries.append(("040000", "tree", self._with_blob(base_sub, rest, blob), head))
        else:
            entries.append(("100644", "blob", blob, head))
        return self._mktree(entries)

    def verify_commit_tree(self, commit: str, evaluated: str, rel: str, content: bytes) -> None:
        """Raise unless ``commit``'s tree is exactly ``evaluated`` with ``rel`` set to ``content``."""
        tree = self.tree_of(commit)
        paths = sorted(self._changed(evaluated, tree))
        got = read_any(self.git_dir, f"{tree}:{rel}")
        stored = got[0] if got else ""
        parent_dir = rel.rpartition("/")[0]
        # `.avo` as a file in the candidate is replaced by the folder that holds the scores.
        allowed = {rel, parent_dir} if parent_dir else {rel}
        extra = [p for p in paths if p not in allowed]
        if extra or stored != blob_id(content):
            what = (f"it differs from the evaluated tree {evaluated[:12]} in {', '.join(extra[:5])}"
                    if extra else f"its {rel} is not the score file avo wrote")
            raise AvoError(
                f"the commit {commit[:12]} built for this candidate is not the evaluated tree plus {rel}: "
                f"{what}. The submit was aborted before anything was recorded; the candidate is still in "
                "work/ (something rewrote avo's git objects during the submit?)")

    def _changed(self, old: str, new: str, prefix: str = "") -> list[str]:
        """Paths that differ between two trees (``git diff-tree -r --name-only``), reading only what differs."""
        a = {e[3]: e for e in self._entries(old)}
        b = {e[3]: e for e in self._entries(new)}
        out = []
        for name in sorted(a.keys() | b.keys()):
            ea, eb = a.get(name), b.get(name)
            if ea is not None and eb is not None and ea[0] == eb[0] and ea[2] == eb[2]:
                continue
            if ea is not None and eb is not None and ea[1] == eb[1] == "tree":
                out += self._changed(ea[2], eb[2], f"{prefix}{name}/")
                continue
            for e in (ea, eb):
                if e is not None and e[1] == "tree":
                    out += [prefix + name + "/" + p for _, _, p in self._walk(e[2])]
                elif e is not None:
                    out.append(prefix + name)
        return sorted(set(out))

    def export(self, treeish: str, dest: Path) -> None:
        """Write exactly the files of ``treeish`` into ``dest`` (without ``.git``).

        Blobs are written as git stores them: no ``export-ignore``/``export-subst``
        attributes, no filters, so what is evaluated is byte for byte what is committed.
        A candidate that is not self-contained (a symlink leading out of the tree, a nested
        repository whose files git does not hold) raises :class:`CandidateError` naming the path.
        """
        entries = list(self._walk(self.tree_of(treeish)))
        nested = [path for mode, _, path in entries if mode == _GITLINK]
        if nested:
            raise CandidateError(
                f"work/{nested[0]} is a nested git repository: git records only its commit id, not "
                f"its files, so the candidate cannot be evaluated or committed. Remove "
                f"work/{nested[0]}/.git (keep the files) and try again.")
        blobs = self._read_blobs([sha for _, sha, _ in entries])
        dest.mkdir(parents=True, exist_ok=True)
        root = dest.resolve()
        # Regular files first, links last, so no write can follow a link out of dest.
        for mode, sha, path in sorted(entries, key=lambda e: e[0] == _SYMLINK):
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == _SYMLINK:
                target.symlink_to(os.fsdecode(blobs[sha]))
                continue
            target.write_bytes(blobs[sha])
            target.chmod(0o755 if mode == "100755" else 0o644)
        for mode, _, path in entries:
            if mode != _SYMLINK:
                continue
            resolved = Path(os.path.realpath(dest / path))
            if resolved != root and root not in resolved.parents:
                raise CandidateError(
                    f"work/{path} is a symlink to {os.readlink(dest / path)!r}, outside work/: a "
                    "candidate must be self-contained (copy the file into work/ instead).")

    def _read_blobs(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The contents of ``shas`` through one ``git cat-file --batch``."""
        return {sha: self._read(sha, "blob") for sha in dict.fromkeys(shas)}

    def tree_of(self, treeish: str) -> str:
        """The tree a commit, tag or tree id (or a ref) names."""
        spec = treeish
        if not _is_sha(spec):
            spec = ref_of(self.git_dir, spec if spec == "HEAD" or spec.startswith("refs/") else f"refs/tags/{spec}") \
                or spec
        for _ in range(5):
            got = read_any(self.git_dir, spec)
            if got is None:
                break
            if got[1] == "tree":
                return got[0]
            if got[1] == "commit":
                return _parse_commit(got[0], got[2]).tree
            if got[1] != "tag":
                break
            spec = got[2][7:47].decode()
        raise AvoError(f"git cannot find the tree of {treeish} in {self.work}")

    def diff(self, old: str, new: str) -> str:
        """Unified diff between two tree-ishes, leaving out avo's own metadata."""
        return self.git("diff", "--no-color", "--no-ext-diff", "--no-textconv", "--binary", old, new,
                        "--", ".", f":(exclude){META_DIR}")

    # -- commits and tags -----------------------------------------------------------------
    def head(self) -> str | None:
        """The commit HEAD names, or ``None`` (no commit yet, or HEAD names no commit)."""
        self._refuse_foreign()
        return ref_of(self.git_dir, "HEAD")

    def commit_tree(self, tree: str, parent: str | None, message: str) -> str:
        """Write a commit of ``tree`` (as ``git commit-tree`` would, author and committer avo)."""
        when = int(time.time())
        off = time.localtime(when).tm_gmtoff // 60
        tz = f"{'+' if off >= 0 else '-'}{abs(off) // 60:02d}{abs(off) % 60:02d}"
        who = f"avo <avo@localhost> {when} {tz}"
        head = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "") + f"author {who}\ncommitter {who}\n\n"
        self._read(tree, "tree")  # as git does: refuse a tree that is not there
        return self.objects().write("commit", head.encode() + message.encode())

    def _on_branch(self) -> None:
        # An agent may have checked out a tag or another branch; the lineage is `main`.
        head = _small_file(self.work / ".git" / "HEAD")
        if head != f"ref: refs/heads/{BRANCH}":
            self.objects()
            _write_file_atomic(self.git_dir / "HEAD", f"ref: refs/heads/{BRANCH}\n".encode())

    def repair_head(self) -> bool:
        """Point HEAD at the lineage's branch again if it is not a regular file (a pipe every
        git process would wait on, a folder); whether it had to."""
        head = self.git_dir / "HEAD"
        try:
            if stat.S_ISREG(os.stat(head).st_mode):
                return False
        except FileNotFoundError:
            if not os.path.lexists(head):
                return False  # no HEAD at all: git says the repository is broken
        if os.path.isdir(head) and not os.path.islink(head):
            shutil.rmtree(head)
        else:
            os.unlink(head)
        _write_file_atomic(head, f"ref: refs/heads/{BRANCH}\n".encode())
        return True

    def set_ref(self, ref: str, sha: str) -> None:
        """Point ``ref`` (``refs/heads/...``, ``refs/tags/...``) at the commit ``sha``, in-process."""
        self._read(sha, "commit")
        _write_file_atomic(self.git_dir / ref, f"{sha}\n".encode(), inside=self.git_dir)

    def move_branch(self, sha: str) -> None:
        """Point the branch and HEAD at ``sha``, index to match, work tree untouched.

        The agent's index is replaced, never read: a damaged one cannot stop a commit.
        """
        self._on_branch()
        self.set_ref(f"refs/heads/{BRANCH}", sha)
        with self._temp_index() as index:
            self._write_index(index, self.tree_of(sha))
            os.replace(index, self.work / ".git" / "index")

    def reset_hard(self, sha: str, snapshot: tuple[str, Path] | None = None, keep_into: Path | None = None
                   ) -> list[str]:
        """Make the work tree exactly ``sha`` (ignored files are kept).

        ``snapshot``: ``(tree, index)``, what :meth:`snapshot_tree` returned and the index it
        kept, when work/ holds exactly that tree still (nothing written since). Then one
        ``git read-tree --reset -u`` from that index does what ``reset --hard`` and ``clean``
        do: every file of the index that ``sha`` lacks (every file work/ holds that the
        ignore rules do not cover) is removed, every other file made ``sha``'s. Only while
        the candidate's ``.gitignore`` files are ``sha``'s: otherwise what a clean removes is
        decided by other rules, and both processes run. Empty folders stay (git tracks none).

        ``keep_into``: where files go that only the discarded work's own ``.gitignore`` files
        ignored (returned, relative to work/). No snapshot or diff holds them (they were
        ignored), and under ``sha``'s rules they are untracked: a clean would delete them. So
        when work/'s ignore files differ from ``sha``'s, work/ is cleaned under its own rules
        first, reset, and what is then untracked is moved there instead of deleted.
        """
        self._on_branch()
        if snapshot is not None and self._reset_from(sha, *snapshot):
            return []
        if keep_into is None or not self._own_ignore_rules(sha):
            self.git("reset", "-q", "--hard", sha)
            self.git("clean", "-q", "-fd")
            return []
        self.git("clean", "-q", "-fd")  # untracked under work/'s own rules: in the archived diff
        self.git("reset", "-q", "--hard", sha)
        left = self.git_bytes("ls-files", "-z", "--others", "--exclude-standard")
        moved: list[str] = []
        into: int | None = None
        try:
            for raw in filter(None, left.split(b"\0")):
                rel = os.fsdecode(raw)
                if into is None:
                    into = _fresh_folder(keep_into)
                *folders, name = rel.split("/")
                # Renamed to exactly that name, never moved "into" a folder, in folders reached
                # from the fresh one without following a link (the agent names them, and races).
                try:
                    at = own_subfolders(os.dup(into), folders, keep_into)
                    try:
                        os.rename(self.work / rel, name, dst_dir_fd=at)
                    finally:
                        os.close(at)
                except (OSError, AvoError):
                    continue  # gone meanwhile, or cannot be moved: left where it is, as git left it
                moved.append(rel)
        finally:
            if into is not None:
                os.close(into)
        return moved

    def _drop_reflogs(self) -> None:
        """Remove work/.git/logs before a git command that may move a ref: git appends to an
        existing reflog whatever the configuration says, and through a link planted there."""
        logs = self.git_dir / "logs"
        try:
            mode = logs.lstat().st_mode
        except FileNotFoundError:
            return
        if stat.S_ISDIR(mode):
            shutil.rmtree(logs)  # links inside are removed, never followed
        else:
            logs.unlink()

    def _own_ignore_rules(self, sha: str) -> bool:
        """Whether work/'s ``.gitignore`` files (the rules a clean goes by) are not ``sha``'s."""
        theirs = {path: blob for mode, blob, path in self._walk(self.tree_of(sha))
                  if path.rpartition("/")[2] == ".gitignore"}
        ours: dict[str, str] = {}
        for root, _dirs, files in _walk_work(self.work):
            if ".gitignore" in files:
                path = os.path.join(root, ".gitignore")
                try:
                    fd = open_regular(path, follow_links=False, why="git would wait on it")
                except (OSError, AvoError):
                    return True  # a link, a pipe: take the careful path
                with os.fdopen(fd, "rb") as fh:
                    if os.fstat(fh.fileno()).st_size > _REFS_FILE_MAX:
                        return True  # no real ignore file is this large; nothing is read whole
                    ours[os.path.relpath(path, self.work).replace(os.sep, "/")] = blob_id(fh.read())
        return ours != theirs

    def _reset_from(self, sha: str, candidate: str, index: Path) -> bool:
        target = self.tree_of(sha)
        try:
            ours, theirs = list(self._walk(candidate)), list(self._walk(target))
        except CandidateError:  # a crafted tree (two entries under one name): git's own reset
            return False
        if any(mode == _GITLINK for mode, _, _ in ours):
            return False
        # The index lived through the evaluation: used only while it still holds exactly the
        # candidate (an index rewritten meanwhile would have git delete what it names).
        held = _index_files(index)
        if held is None or {os.fsdecode(p): (m, s.hex()) for m, s, p in held} != {p: (m, s) for m, s, p in ours}:
            return False

        def rules(files: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
            return sorted(f for f in files if f[2].rpartition("/")[2] == ".gitignore")

        if rules(ours) != rules(theirs):
            return False
        self.git("read-tree", "--reset", "-u", target, index=index)
        self.set_ref(f"refs/heads/{BRANCH}", sha)
        os.replace(index, self.work / ".git" / "index")
        return True

    def set_tags(self, wanted: dict[str, str]) -> list[str]:
        """Make the ``vN`` tags exactly ``wanted``, all of them in ``packed-refs``; return the
        names that had to be repaired (moved, deleted, added by someone else, or missing).

        Every command checks every tag, so they live in the one file git packs refs into, not
        one loose file each: at 10,000 versions reading loose tags cost ~650 ms per submit,
        the packed file ~15 ms. A loose ``vN`` (``git tag`` writes one) is folded into
        ``packed-refs`` and removed; the agent's other refs are kept as they are. The file
        is left alone only when it holds exactly avo's tags, in git's order; otherwise it is
        rewritten (sorted, the agent's entries verbatim with their peeled lines).
        """
        self.objects()
        git_dir = self.git_dir
        header, kept, packed, ordered = _split_packed_refs(_read_packed_refs(git_dir))
        loose = _loose_version_tags(git_dir / "refs" / "tags")
        current = {**packed, **{name: _small_file(path) for name, path in loose.items()}}  # loose wins, as in git
        repaired = [name for name, sha in wanted.items() if current.get(name) != sha]
        repaired += [name for name in current if name not in wanted]
        if ordered and not loose and not repaired:
            return []
        for name in repaired:
            if name in wanted:
                self._read(wanted[name], "commit")  # a ref only ever names a commit avo can read
        entries = [*kept, *((f"refs/tags/{name}", f"{sha} refs/tags/{name}\n") for name, sha in wanted.items())]
        entries.sort(key=lambda e: e[0].encode("utf-8", "surrogateescape"))  # git's order: by the bytes
        _write_file_atomic(git_dir / "packed-refs",
                           (header + "".join(e[1] for e in entries)).encode("utf-8", "surrogateescape"))
        for path in loose.values():  # after the packed file holds the right value: loose would win over it
            path.unlink(missing_ok=True)
        return repaired

    def add_tag(self, name: str, sha: str, wanted: dict[str, str]) -> None:
        """Add the new version's tag ``name`` (one of ``wanted``, whose others :meth:`set_tags`
        made exact just before) as one line put in its place, without parsing the file."""
        git_dir = self.git_dir
        raw = _read_packed_refs(git_dir)
        exact = raw.startswith("# pack-refs with:") and raw.endswith("\n") and "\n\n" not in raw \
            and "\r" not in raw and "\n^" not in raw and f" refs/tags/{name}\n" not in raw
        if not exact or _loose_version_tags(git_dir / "refs" / "tags"):
            self.set_tags(wanted)  # not as set_tags leaves it: the whole check and rewrite
            return
        self._read(sha, "commit")
        lines = [line + "\n" for line in raw.split("\n")[:-1]]  # git's lines: "\n" ends each, nothing else
        ref = f"refs/tags/{name}".encode()
        at = bisect.bisect(lines, ref, lo=1, key=lambda line: line[41:-1].encode("utf-8", "surrogateescape"))
        lines.insert(at, f"{sha} refs/tags/{name}\n")
        _write_file_atomic(git_dir / "packed-refs", "".join(lines).encode("utf-8", "surrogateescape"))

    # -- the private backup ---------------------------------------------------------------
    def backup(self, mirror: Path, sha: str) -> None:
        """Copy the lineage up to ``sha`` into avo's private bare repository ``mirror``.

        work/.git is the agent's to break; the mirror, outside work/, lets avo restore every
        accepted version if it is deleted or pruned, and is what the record is checked
        against. Versions form one chain, so pushing the newest carries all of them; the push
        only fast-forwards, so no record (however edited) can take a version out of it.
        """
        linked = linked_on_the_way(mirror.parent.parent, mirror)
        if linked:  # git init and the copy would write wherever it leads
            raise AvoError(f"{linked}: avo keeps its private backup only in its own folder, never through a link")
        if not (mirror / "HEAD").exists():
            subprocess.run([program("git"), "init", "-q", "--bare", "--template=", str(mirror)], env=git_env(),
                           capture_output=True)
        try:
            self._copy_into(mirror, sha)
        except (AvoError, OSError) as exc:
            raise AvoError(f"cannot copy {sha[:12]} into avo's private backup {mirror}: {exc}") from None

    def _copy_into(self, mirror: Path, sha: str) -> None:
        """What ``git push`` (fast-forward only) does, in-process: copy the objects ``mirror``
        lacks, newest commit last, then move its branch, only forward."""
        theirs = _objects(mirror)
        current = _resolve_ref(mirror, f"refs/heads/{BRANCH}")
        if current is not None and read_any(mirror, current) is None:
            current = None  # a branch naming a commit the mirror lacks (written through a link): copy all it lacks
        if current == sha:
            return
        new: list[tuple[str, bytes]] = []
        spec: str | None = sha
        while spec and spec != current:
            if current is None and read_any(mirror, spec) is not None:
                break
            data = self._read(spec, "commit")
            new.append((spec, data))
            parents = _parse_commit(spec, data).parents
            if len(parents) > 1:
                raise AvoError(f"{spec[:12]} is a merge: avo's lineage is one chain")
            spec = parents[0] if parents else None
        if current is not None and spec != current:
            raise AvoError(f"{sha[:12]} does not descend from the backup's {current[:12]} (not a fast-forward)")
        root = mirror / "objects"
        for commit, data in reversed(new):
            self._copy_tree(theirs, root, _parse_commit(commit, data).tree)
            _put(theirs, root, commit, "commit", data)
        _write_file_atomic(mirror / "refs" / "heads" / BRANCH, f"{sha}\n".encode(), inside=mirror)

    def _copy_tree(self, theirs: _Objects, root: Path, tree: str) -> None:
        if _has_loose(root, tree):
            return  # written after everything under it: complete
        data = self._read(tree, "tree")
        for _mode, kind, sha, name in _tree_entries(data):
            check_entry_name(name, "")
            if kind == "tree":
                self._copy_tree(theirs, root, sha)
            elif kind == "blob" and not _has_loose(root, sha):
                _put(theirs, root, sha, "blob", self._read(sha, "blob"))
        _put(theirs, root, tree, "tree", data)

    def restore_from(self, mirror: Path) -> bool:
        """Fetch the lineage back from ``mirror`` (re-creating work/.git if it is gone)."""
        if not (mirror / "HEAD").exists():
            return False
        if not os.path.lexists(self.work / ".git"):
            self.init()
        # No FETCH_HEAD: git opens it with fopen("w"), through a link planted at its name.
        self.git("fetch", "-q", "--no-tags", "--no-write-fetch-head", str(mirror),
                 f"+refs/heads/{BRANCH}:refs/avo/backup")
        _forget(self.git_dir)  # new packs: a fresh reader sees them at once
        return True

    def missing_commits(self, shas: Sequence[str]) -> list[str]:
        """Which of ``shas`` (commit ids) have no object in the repository.

        Looked up in-process, in the pack indexes and the loose folders, without reading the
        objects: every submit asks it of every version, so it must cost microseconds each.
        An object that is present but damaged is not found here; git refuses it where it is
        read (and avo's reader where avo reads it), while the record is read from the backup.
        """
        objects = self.git_dir / "objects"
        joined = "".join(shas)
        if len(joined) == 40 * len(shas) and not joined.strip("0123456789abcdef"):  # all ids: no loop per id
            raw = bytes.fromhex(joined)
            ids = [raw[i:i + 20] for i in range(0, len(raw), 20)]
            packed = packed_ids(objects / "pack", ids)
            shas = [sha for sha, id_ in zip(shas, ids, strict=True) if id_ not in packed]
        else:
            packed = packed_ids(objects / "pack", [bytes.fromhex(s) for s in shas if _is_sha(s)])
        listed: dict[str, dict[str, bool]] = {}
        missing = []
        for sha in shas:
            if not _is_sha(sha):
                missing.append(sha)
                continue
            if bytes.fromhex(sha) in packed:
                continue
            fan = listed.get(sha[:2])
            if fan is None:
                try:  # the entries' types come with the listing: no stat per object
                    with os.scandir(objects / sha[:2]) as it:
                        fan = {e.name: e.is_file(follow_symlinks=False) for e in it}
                except OSError:
                    fan = {}
                listed[sha[:2]] = fan
            regular = fan.get(sha[2:])
            if regular is None:
                missing.append(sha)
            elif not regular:  # a pipe git would wait on forever, a folder, a link
                raise AvoError(f"{objects / sha[:2] / sha[2:]} (the commit of an accepted version) is not a "
                               "regular file: git would wait on it or fail; move it away and run the command "
                               "again, and avo restores the commit from its private backup")
        return missing

    def work_signature(self) -> str:
        """A digest of every entry's metadata under work/ (``.git/objects`` left out).

        Any write to a file changes its ctime, which no process without root can set back:
        equal digests taken before and after mean nothing in work/ was written in between.
        work/.git counts too: its HEAD, index, config and info/exclude decide what a snapshot
        holds and what a reset removes; only its objects are written by avo's own snapshot.
        A regular file's content counts as well: a write through a shared mapping onto a page
        that is already dirty changes neither its mtime nor its ctime.
        """
        h = hashlib.sha256()
        top = os.fsencode(self.work)
        git_dir = os.path.join(top, b".git")
        for root, dirs, files in os.walk(top):
            if root == git_dir:
                dirs[:] = [d for d in dirs if d != b"objects"]
            dirs.sort()
            for name in sorted([*dirs, *files]):
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                except OSError:  # removed while walked: written, so never equal to another digest
                    h.update(os.urandom(16))
                    continue
                h.update(b"%s\0%d %d %d %d %d\n" % (path[len(top):], st.st_ino, st.st_mode, st.st_size,
                                                       st.st_mtime_ns, st.st_ctime_ns))
                if stat.S_ISREG(st.st_mode):
                    h.update(_content_digest(path))
        return h.hexdigest()

    def is_dirty(self, best: str) -> bool:
        """Whether work/ differs from ``best`` as a snapshot would see it; writes nothing in the run.

        The temporary index lives outside the run and no object is written, so a reader
        (``avo status``) never touches what a concurrent submit uses.
        """
        if not _is_sha(best):
            raise AvoError(f"is_dirty needs a commit id, not {best!r}")
        self._refuse_foreign()
        refuse_waiting_ignores(self.work)
        # A snapshot starts from work/.git's HEAD: a file the agent committed there stays in it
        # even when an ignore rule covers it, so compare with HEAD when it was moved off best.
        head = _resolve_ref(self.git_dir, "HEAD")
        base = head if head is not None and head != best else best
        with tempfile.TemporaryDirectory(prefix="avo-status-") as tmp, \
                self._temp_index(Path(tmp)) as index:
            # Two git processes and no GitPython: `avo status` is a reader that should start fast.
            self.git("read-tree", base, index=index, readonly=True)
            out = self.git_bytes("status", "--porcelain", "-z", "--no-renames", "--untracked-files=normal",
                                 index=index, readonly=True)
            # XY per entry: Y is the work tree against the index (base's tree); X, the index
            # against work/.git's HEAD, is not the question; "??" is an untracked file.
            if any(e[:2] == b"??" or e[1:2] not in (b"", b" ") for e in out.split(b"\0") if e):
                return True
        if base == best:
            return False
        # work/ is exactly HEAD's tree, as a snapshot would take it: dirty unless that is best's.
        trees = self.git("rev-parse", f"{best}^{{tree}}", f"{base}^{{tree}}", readonly=True).split()
        return trees[0] != trees[1]


def diff_fingerprint(diff: str) -> str:
    """A hash of a diff's changes, ignoring blob ids and hunk positions."""
    kept: Sequence[str] = [
        line for line in diff.splitlines()
        if line[:1] in "+-" or line.startswith("diff --git")
    ]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]


class BackupReader(Lineage):
    """Reads (exports) versions from a run's private backup, never from its work/.git.

    Another island's work/ is its agent's to write; what that run committed is in the backup.
    """

    def __init__(self, backup: Path):
        super().__init__(backup, backup / "index-unused")
        self._store = backup

    @property
    def git_dir(self) -> Path:
        return self._store

    def objects(self) -> _Objects:
        return _objects(self._store)

    def verified_tree_of(self, commit: str) -> str:
        """The tree of ``commit``, read from an object checked to hash to that id (git's reader
        does not check: a loose object rewritten in place would name another tree)."""
        got = read_any(self._store, commit)  # None also when the object does not hash to its id
        if got is None or got[1] != "commit" or got[0] != commit:
            raise AvoError(f"commit {commit[:12]} is not in {self._store}, or its object was rewritten "
                           "(it does not hash to its id)")
        return _parse_commit(commit, got[2]).tree

    def tree_size(self, tree: str) -> tuple[int, int]:
        """How many files ``tree`` holds and their bytes (object headers only)."""
        out = _git(self._store, ["ls-tree", "-r", "-l", "-z", tree], readonly=True)
        files = total = 0
        for entry in out.split(b"\0"):
            if entry:
                files += 1
                size = entry.split(b"\t", 1)[0].split()[-1]
                total += int(size) if size.isdigit() else 0
        return files, total

    def copy_tree_into(self, git_dir: Path, tree: str) -> str:
        """Copy ``tree`` (and every blob under it) into ``git_dir``, each object checked to
        arrive under its id; ``tree``."""
        self._copy_tree(_objects(git_dir), git_dir / "objects", tree)
        return tree
