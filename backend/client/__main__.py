"""The one entry to everything tfconsole runs on a host: ``python [-S] RUN/lib COMMAND ARGS``.

Shipped as ``RUN/lib/__main__.py`` beside the package (``RUN/lib/tfconsole/``). Python runs a
folder's ``__main__.py`` with that folder first on ``sys.path``, so the package imports under its
one name, ``tfconsole``, with no path set by us and no module of ours importable by a bare name.
Where the package is installed, ``python -m tfconsole COMMAND ARGS`` is the same. A run folder
without this file (nothing shipped, or a copy from an older console) exits 2 or 1 before any
command runs; the console says which host and what to do (``backend.hosts.remote``).
"""
from __future__ import annotations

import importlib
import sys

# COMMAND -> the harness module whose main(argv) runs it (each documents its own arguments).
COMMANDS = ("hostctl", "train", "export", "slurm_task", "startup", "ckpt_index", "watch")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python RUN/lib {{{','.join(COMMANDS)}}} ARGS", file=sys.stderr)
        return 2
    module = importlib.import_module(f"tfconsole.harness.{argv[0]}")
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
