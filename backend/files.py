"""Small files written whole or not at all, and a full disk said as ours (``DiskFullError``).

Every writer of the console's own files (run records, alert settings, the login token) goes
through ``write_private``; readers of small JSON files through ``read_dict``.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

from backend.errors import DiskFullError


# A full disk or the user's quota: DiskFullError, never a bare OSError ("unexpected error").
FULL = (errno.ENOSPC, errno.EDQUOT)
# What a keeper needs free to record a step of its work (the state twice, a log line, an alert):
# with less, it waits (``room``) rather than start what it could not record.
ROOM_BYTES = 1 << 20


def room(folder: Path, need: int = ROOM_BYTES) -> DiskFullError | None:
    """The DiskFullError to say when ``folder``'s disk has less than ``need`` bytes or no inode
    free for us (root may use the blocks reserved for it), else None. Asked, not tried: no write."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None   # gone, or not ours: whoever writes there says so
    root = os.geteuid() == 0
    free = (fs.f_bfree if root else fs.f_bavail) * fs.f_frsize
    inodes = fs.f_ffree if root else fs.f_favail
    return DiskFullError(str(folder)) if free < need or (fs.f_files and not inodes) else None


@contextlib.contextmanager
def full_disk_named(folder: Path | str, to: str) -> Iterator[None]:
    """An ENOSPC or EDQUOT inside becomes DiskFullError naming ``folder`` and what failed."""
    try:
        yield
    except DiskFullError:
        raise
    except OSError as err:
        if err.errno in FULL:
            raise DiskFullError(str(folder), to=to) from None
        raise


def write_private(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text``, readable by the owner only.

    A unique temporary name per writer (two writers never share one), fsync before the rename
    (a crash leaves the old file or the new one, never an empty one). A full disk leaves the old
    file whole and raises DiskFullError.
    """
    with full_disk_named(path.parent, f"write {path.name}"):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:   # mkstemp creates the file 0600
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def read_dict(path: Path) -> dict:
    """A small JSON file of a run's folder as a dict; {} when it is missing or damaged."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
