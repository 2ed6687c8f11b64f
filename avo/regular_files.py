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
