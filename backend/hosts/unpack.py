"""Unpack a run's bundle (a tar on stdin) into its run folder, each file replaced atomically.

Run on the host by ``remote.install`` as ``python -S -c <this file's text> RUN_DIR``: standard
library only, and old Pythons too (no walrus, no f-strings). Why not ``tar -x``:

- a restart installs the harness again while the console and the CLI run ``hostctl`` from it;
  tar rewrites a file in place (unlink, create, write), so a ``hostctl status`` started meanwhile
  can read half of ``hostctl.py`` (an IndentationError, seen in CI), and a tar killed mid-file
  leaves it half written for good. Here each file is written beside its final name and renamed
  over it (``os.replace``): a reader sees the old file or the new one, never a part;
- hosts sharing a filesystem (an NFS home) unpack into one run folder at once, and two GNU tars
  racing to make a missing folder fail; ``os.makedirs(exist_ok=True)`` does not.
"""
import io
import os
import sys
import tarfile


def unpack(data, root):
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts:
                raise SystemExit("refusing a bundle member outside the run folder: %r" % member.name)
            path = os.path.join(root, *parts)
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            part = "%s.%d.part" % (path, os.getpid())
            with open(part, "wb") as out:
                out.write(tar.extractfile(member).read())
            os.chmod(part, member.mode & 0o755)
            os.replace(part, path)


if __name__ == "__main__":
    unpack(sys.stdin.buffer.read(), sys.argv[1])
