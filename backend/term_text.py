"""Text from jobs and hosts, shown on a terminal or in a log as text.

A job's exception, a log tail or a host's stderr can hold terminal control sequences: ESC [2J
clears the screen, ESC ]0;...BEL sets the window title, ESC [8m hides what follows, a bare CR
writes over the line before it, a bidi override reorders what is read. The rule here is the
terminal's: newlines and tabs stay, every other control character is shown as an escape
(``\\x1b``, ``\\r``, ``\\u202e``), so the text reads as what it is and the terminal does nothing
with it. The console's pages escape the same text as Markdown (console/markdown_safe.py).

``term_safe`` is the one rule: the command line prints through it (backend/cli/safe_stream.py's
``SafeStream``) and the keeper's log is written through it (backend/runs/keeper_log.py).
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
