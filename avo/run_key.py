"""The run's signing key: avo signs the private files it reads back later with it.

Two files in ``.avo/`` steer what a command does next: the record checkpoint
(:mod:`avo.record_checkpoint`, what was already verified) and a submit's journal
(``pending.json``, what a killed submit still has to write). Each is stored as
``{"body": ..., "mac": HMAC-SHA256(key, body)}`` under a random 32-byte key avo writes once
into ``.avo/check.key`` (mode 0600), so one written by hand, or copied from another run, is
told apart. Every trajectory line avo appends carries the same key's signature of the line
as a last ``mac`` field, so a line re-chained onto the trajectory by hand cannot steer the
policy (:class:`LineSignatures`). An agent that reads the key can still sign: docs/SECURITY.md
says where that leaves the record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from avo.regular_files import NotRegularFile, open_regular
from avo.state import RunPaths

# Far above any journal or checkpoint avo writes; a bigger file is not one of them.
MAX_SIGNED_BYTES = 64 << 20


def key_path(paths: RunPaths) -> Path:
    return paths.private / "check.key"


# Follows the key in a key written with a run's first trajectory line: every line is signed,
# so a trajectory whose signatures were stripped (line 1's included) is not taken as a run
# started before signing, whose lines all count.
_LINES_SIGNED = b"\nevery trajectory line signed\n"


def _read_raw(paths: RunPaths) -> bytes:
    # Not a plain read: a pipe put where the key is would hang every command (NotRegularFile).
    fd = open_regular(key_path(paths), why="avo's signing key; delete it and the next command writes a new one")
    with os.fdopen(fd, "rb") as fh:
        return fh.read(4096)


def _read_key(paths: RunPaths) -> bytes | None:
    return _read_raw(paths).removesuffix(_LINES_SIGNED) or None


def run_key(paths: RunPaths, *, create: bool, first_line: bool = False) -> bytes | None:
    """The run's key; ``None`` when there is none and ``create`` is false.

    ``first_line``: the key is made for the run's first trajectory line (marked so).
    """
    try:
        return _read_key(paths)
    except FileNotFoundError:
        if not create:
            return None
    try:
        fd = os.open(key_path(paths), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another command made it meanwhile
        return _read_key(paths)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(32) + (_LINES_SIGNED if first_line else b""))
        fh.flush()
        os.fsync(fh.fileno())
    return _read_key(paths)


def mac(key: bytes, body: Any) -> str:
    """The signature of ``body`` (its JSON with sorted keys)."""
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def signed(paths: RunPaths, body: dict[str, Any]) -> str:
    """``body`` as the JSON text of a signed file (the key is made if the run has none)."""
    key = run_key(paths, create=True)
    assert key is not None
    return json.dumps({"body": body, "mac": mac(key, body)})


def verified(paths: RunPaths, raw: bytes) -> dict[str, Any] | None:
    """The body of a signed file's bytes if avo signed it with this run's key, else ``None``."""
    key = run_key(paths, create=False)
    if key is None:
        return None
    try:
        data = json.loads(raw)
        body, got = data["body"], data["mac"]
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nesting too deep
        return None
    if not (isinstance(body, dict) and isinstance(got, str) and hmac.compare_digest(got, mac(key, body))):
        return None
    return body


def read_verified(paths: RunPaths, path: Path) -> dict[str, Any] | None:
    """:func:`verified` of the file at ``path``; ``None`` also when it is missing, a link, a
    pipe or a device (an agent's, read without waiting on it) or bigger than avo writes."""
    try:
        fd = open_regular(path, follow_links=False, why="a file avo signs")
    except (OSError, NotRegularFile):
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_SIGNED_BYTES + 1)
    return verified(paths, raw) if len(raw) <= MAX_SIGNED_BYTES else None


# -- trajectory lines ---------------------------------------------------------------------------
# A line re-chained onto the trajectory by hand (its `prev` is one SHA-256) is read back like any
# other; the counters the policy is steered by (the best's re-measurements, the supervisor's
# state) are taken only from lines avo signed, in a run whose first line is signed.

_LINE_MAC = re.compile(rb', "mac": "([0-9a-f]{64})"\}\Z')


def sign_line(key: bytes, body: bytes) -> bytes:
    """``body`` (one record's JSON object) with its signature added as a last ``mac`` field."""
    return body[:-1] + b', "mac": "' + hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b'"}'


def line_signed(key: bytes | None, line: bytes) -> bool | None:
    """Whether ``line`` carries a valid signature under ``key``; ``None`` when it carries none."""
    m = _LINE_MAC.search(line)
    if m is None:
        return None
    if key is None:
        return False
    want = hmac.new(key, line[:m.start()] + b"}", hashlib.sha256).hexdigest()
    return hmac.compare_digest(m[1].decode(), want)


class LineSignatures:
    """Which of a run's trajectory lines may steer the policy.

    A run whose first line is signed, whose key was written with it, or whose start record's
    terms say so (every run started since signing: ``terms_signed``) counts a line only if its
    signature is valid under the run's key; an older run's lines all count, as before.
    """

    def __init__(self, paths: RunPaths, first_line: bytes | None, terms_signed: bool):
        try:
            raw = _read_raw(paths)
        except FileNotFoundError:
            raw = b""
        self.key = raw.removesuffix(_LINES_SIGNED) or None
        # Marked: the key was written with the run's first trajectory line, so every line is signed.
        self.signed_run = terms_signed or raw.endswith(_LINES_SIGNED) or \
            (first_line is not None and line_signed(self.key, first_line) is not None)

    def counts(self, line: bytes) -> bool:
        return not self.signed_run or line_signed(self.key, line) is True


def says_signed(terms: Any) -> bool:
    """A start record's terms say every line of the run is signed (``options.signed_lines``).

    Asked of every start record the check reads, wherever it is in the trajectory: the terms
    v0's commit pins hold it, so no arrangement of lines (the start record moved off line 1,
    a line put before it) makes a run started since signing look older."""
    options = terms.get("options") if isinstance(terms, dict) else None
    return isinstance(options, dict) and options.get("signed_lines") is True


def started_signed(records: Iterable[dict[str, Any] | None]) -> bool:
    """Some start record among ``records`` says every line of the run is signed."""
    return any(r is not None and r.get("kind") == "start" and says_signed(r.get("terms")) for r in records)


def trajectory_signatures(paths: RunPaths, data: bytes) -> LineSignatures:
    """:class:`LineSignatures` of the trajectory ``data``, known before its chain is walked (only
    the lines that can hold a start record are parsed)."""
    from avo.chain import parse

    def starts() -> Iterator[dict[str, Any] | None]:
        at = data.find(b'"start"')
        while at != -1:
            begin, end = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
            end = len(data) if end == -1 else end
            yield parse(data[begin:end])
            at = data.find(b'"start"', end)

    return LineSignatures(paths, first_line(data), started_signed(starts()))


def first_line(data: bytes) -> bytes | None:
    """The trajectory's first complete line (``None`` when it has none)."""
    end = data.find(b"\n")
    return data[:end] if end > 0 else None
