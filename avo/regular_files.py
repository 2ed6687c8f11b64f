"""Opening the files avo reads and writes without using what an agent may have put in their place.

A plain ``open`` of a FIFO waits forever for a writer, and ``/dev/zero`` is read forever:
every record file, object and pack index avo reads is opened non-blocking and must be a
regular file. A file avo writes is reached from a folder it trusts one name at a time, never
through a link, at the moment of the write: a check made earlier (at a command's start) leaves
a window in which an agent's process can swap ``logs/`` for a link to ``.avo/``.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from avo.errors import AvoError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class NotRegularFile(AvoError):
    """A pipe, a device or a folder is where avo reads a file."""


def open_regular(path: Path | str | bytes, *, follow_links: bool = True, why: str = "") -> int:
    """A read-only descriptor of ``path`` if it is a regular file, opened without blocking (and
    without following a link unless ``follow_links``).

    Raises FileNotFoundError if nothing is there (and what ``os.open`` raises, e.g. for a link
    not followed), :class:`NotRegularFile` for anything else; ``why`` ends its message.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFile(f"{os.fsdecode(path)} is not a regular file (a pipe or a device?): {why}")
    return fd


def read_text_of(path: Path, cap: int) -> str | None:
    """The text of a file the agent can write (``NOTES.md``, a brief, an archived diff) as avo
    shows it: at most ``cap`` bytes (a sparse file can claim terabytes), undecodable bytes
    replaced, and never through a link, a second name (a hard link to avo's key, shipped in a
    report), a pipe or a device (read forever): for those, a note saying why it is not shown.
    None when nothing is there."""
    try:
        fd = open_regular(path, follow_links=False, why="not shown")
    except FileNotFoundError:
        return None
    except (OSError, NotRegularFile) as exc:
        why = "a symlink" if os.path.islink(path) else "not a regular file"
        return f"({path.name} is {why}: not shown; {getattr(exc, 'strerror', None) or 'avo reads only its own files'})"
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_nlink > 1:
            return f"({path.name} has a second name (a hard link): not shown)"
        data = fh.read(cap + 1)
    text = data[:cap].decode("utf-8", "replace")
    return text + f"\n… (cut at {cap:,} bytes)" if len(data) > cap else text


def set_aside(path: Path | str, *, dir_fd: int | None = None) -> str:
    """Rename whatever is at ``path`` (a link the agent planted, a folder of links) to a fresh
    ``NAME-found-XXXXXXXX`` beside it, never following it; the new name (a path unless
    ``dir_fd``: then both names are relative to that folder)."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    aside = os.path.join(head, f"{name}-found-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return aside


def regain_folder(parent_fd: int, name: str) -> str | None:
    """Make ``name`` in the folder ``parent_fd`` a real folder of avo's: anything else there (a
    link, a file, a pipe) is set aside and a folder made; a missing one is made. A note saying
    what was set aside, or None."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    note = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        aside = set_aside(name, dir_fd=parent_fd)
        what = "a link" if stat.S_ISLNK(st.st_mode) else "not a folder"
        note = (f"{name}/ was {what}: avo writes only into the run's own folders, so it was renamed to "
                f"{aside} and made again")
    if st is None or note:
        try:
            os.mkdir(name, 0o777, dir_fd=parent_fd)
        except FileExistsError:
            pass  # made meanwhile: opening it below says whether it is a folder
    return note


def own_folder(path: Path, levels: int) -> int:
    """A descriptor of the folder ``path``, reached from ``path.parents[levels - 1]`` one name at
    a time without following a link (``levels`` 0: ``path`` itself, links followed, the
    user's choice). Each of those ``levels`` folders is avo's own: one that is a link or not a
    folder is set aside and made again (said on stderr), one that is missing is made."""
    if levels == 0:
        return os.open(path, _DIR_FLAGS)
    start = path.parents[levels - 1]
    return own_subfolders(os.open(start, _DIR_FLAGS), path.parts[len(path.parts) - levels:], start)


def own_subfolders(fd: int, names: Sequence[str], where: Path) -> int:
    """A descriptor of the folder ``names`` leads to below the folder ``fd`` (at ``where``,
    for messages), as :func:`own_folder` reaches it. ``fd`` is closed, also on an error."""
    try:
        for name in names:
            note = regain_folder(fd, name)
            if note:
                print(f"avo: in {where}, {note}", file=sys.stderr)
            where = where / name
            try:
                nfd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:  # replaced again in the instant since: not chased
                raise AvoError(f"{where} is not a folder of avo's ({exc.strerror}); avo writes only into "
                               "the run's own folders, never through a link") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def linked_on_the_way(root: Path, path: Path) -> str | None:
    """What is wrong on the way from ``root`` down to ``path`` (included): the first name that
    is a link or not a folder, as a message; None when each is a real folder (or missing).
    For what avo hands to a program by path (git), where no descriptor can be held instead."""
    here = root
    for name in path.relative_to(root).parts:
        here = here / name
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return f"{here} is a symlink to {os.readlink(here)!r}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{here} is not a folder"
    return None


def write_json_atomic(path: Path, data: str | bytes, *, sync: Literal["all", "file", "none"] = "all",
                      own: int = 0) -> None:
    """Write-then-rename: a reader sees the old file or the new, never half.

    ``sync``: what survives a power cut. "all" syncs the file and the rename; "file" only
    the file (a lost rename leaves the previous file whole, for a write a later command can
    redo); "none" neither (a cache that is rebuilt when it is missing or torn).
    ``own``: how many folders above the file are avo's own, reached without following a link
    (:func:`own_folder`); a link at the file's name is replaced, never written through.
    """
    folder = own_folder(path.parent, own)
    # A fresh name, created exclusively and never through a link: a name known in advance
    # (the pid) could be planted as a symlink, and the write would land where it points.
    tmp = f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode() if isinstance(data, str) else data)
                fh.flush()
                if sync != "none":
                    os.fsync(fh.fileno())
            os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=folder)
            except FileNotFoundError:
                pass
            raise
        if sync == "all":
            os.fsync(folder)
    finally:
        os.close(folder)


def open_own(path: Path, *, append: bool, own: int = 0) -> int:
    """A descriptor for writing a file avo names in a folder the agent can write (``logs/``),
    never through a link: a symbolic link at the name is refused (``O_NOFOLLOW``), and so is a
    file with a second name (a hard link to one of avo's own, its key say), before anything is
    written. ``append``: add to what is there; else it is emptied once found to be avo's alone.
    ``own``: how many folders above the file are avo's own (:func:`own_folder`)."""
    folder = own_folder(path.parent, own)
    try:
        fd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                     | (os.O_APPEND if append else 0), 0o644, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise AvoError(f"{path} is a symlink; avo writes its own files there, never through a link") from None
        raise exc
    finally:
        os.close(folder)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise AvoError(f"{path} is {'not a regular file' if not stat.S_ISREG(st.st_mode) else 'a hard link'}; "
                       "avo writes its own files there, never into another file")
    if not append:
        os.ftruncate(fd, 0)
    return fd
