"""A stream line from a host is bounded: a host that prints 5 MB with no newline (or a hostile
agent) costs the console at most MAX_LINE_BYTES, and the lines after it arrive whole."""
from __future__ import annotations

import io

from backend.hosts.base import MAX_LINE_BYTES, Lines


def test_an_over_long_line_is_cut_with_a_note_and_the_next_line_is_whole():
    long = b"x" * (5 * MAX_LINE_BYTES + 123)
    lines = list(Lines("h2", io.BytesIO(long + b"\n" + b'{"type": "heartbeat"}\n'), (OSError,)))
    assert len(lines) == 2
    first, second = lines
    assert len(first) < MAX_LINE_BYTES + 100
    assert first.endswith(f"... [cut {len(long) - MAX_LINE_BYTES} bytes]\n".encode())
    assert second == b'{"type": "heartbeat"}\n'


def test_a_line_at_the_end_of_the_stream_with_no_newline_is_cut_too():
    lines = list(Lines("h2", io.BytesIO(b"y" * (MAX_LINE_BYTES + 10)), (OSError,)))
    assert lines == [b"y" * MAX_LINE_BYTES + b"... [cut 10 bytes]\n"]


def test_ordinary_lines_pass_unchanged():
    assert list(Lines("h2", io.BytesIO(b"a\nbb\n"), (OSError,))) == [b"a\n", b"bb\n"]
