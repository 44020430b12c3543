"""Text from jobs and hosts, printed on a terminal as text (issue 35).

A job's exception, a log tail or a host's stderr can hold terminal control sequences: ESC [2J
clears the screen, ESC ]0;...BEL sets the window title, ESC [8m hides what follows, a bare CR
writes over the line before it, a bidi override reorders what is read. The console's pages escape
the same text as Markdown (console/plain.py, issue 27); here the rule is the terminal's: newlines
and tabs stay, every other control character is shown as an escape (``\\x1b``, ``\\r``,
``\\u202e``), so the text reads as what it is and the terminal does nothing with it.

``term_safe`` is the one rule; ``SafeStream`` applies it to everything the command line prints
(``backend.cli.main`` wraps stdout and stderr with it), so no printer of host text can forget it.
"""
from __future__ import annotations

import re

# C0 controls but \t and \n, DEL, C1 controls (U+009B is a one-character CSI), and the bidi
# embeddings, overrides and isolates ("Trojan Source": text shown in another order than it is).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f", "\x08": "\\b", "\x00": "\\0"}


def _shown(match: re.Match) -> str:
    c = match.group()
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def term_safe(text: object) -> str:
    """``text`` with every control character but newline and tab made visible as an escape."""
    return _CONTROL.sub(_shown, str(text))


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
