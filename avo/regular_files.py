"""Opening a file avo reads without waiting on what an agent may have put in its place.

A plain ``open`` of a FIFO waits forever for a writer, and ``/dev/zero`` is read forever:
every record file, object and pack index avo reads is opened non-blocking and must be a
regular file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from avo.errors import AvoError


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


def open_own(path: Path, *, append: bool) -> int:
    """A descriptor for writing a file avo names in a folder the agent can write (``logs/``),
    never through a link: a symbolic link at the name is refused (``O_NOFOLLOW``), and so is a
    file with a second name (a hard link to one of avo's own, its key say), before anything is
    written. ``append``: add to what is there; else it is emptied once found to be avo's alone."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                     | (os.O_APPEND if append else 0), 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise AvoError(f"{path} is a symlink; avo writes its own files there, never through a link") from None
        raise exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise AvoError(f"{path} is {'not a regular file' if not stat.S_ISREG(st.st_mode) else 'a hard link'}; "
                       "avo writes its own files there, never into another file")
    if not append:
        os.ftruncate(fd, 0)
    return fd
