"""Everything the command line prints goes through ``term_safe`` (backend/term_text.py):
``backend.cli.main`` wraps stdout and stderr with ``SafeStream``, so no printer of host text can
forget it.
"""
from __future__ import annotations

from backend.term_text import term_safe


class SafeStream:
    """A text stream that writes everything through ``term_safe``: no ESC reaches the terminal."""

    def __init__(self, raw) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(term_safe(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):   # flush, fileno, isatty, encoding: the real stream's
        return getattr(self.raw, name)
