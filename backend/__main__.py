"""``python -m backend``: the command line, the same as ``tfconsole`` (backend/cli/main.py)."""
import sys

from backend.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
