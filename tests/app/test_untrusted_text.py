"""Job and host output reaches the page as text, never as Markdown (issue 27): a "diagnosis" made
of a log line with a link or an image showed a clickable link and fetched the image."""
from __future__ import annotations

import time

from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from console.monitor_view import watch_line
from console.markdown_safe import md_escape

HOSTILE = ("Error: see [the fix](http://evil.example/phish) ![x](http://evil.example/track.png) "
           "<http://evil.example/a> **bold** `code` $x^2$ :red[alarm] a_b_c #1")


def _as_html(markdown: str) -> str:
    return MarkdownIt("commonmark").render(markdown)


def _status_page(diagnosis: str) -> None:
    from types import SimpleNamespace

    from console.ui import widgets
    status = SimpleNamespace(name="worker-1", host="h", label="failed", diagnosis=diagnosis)
    run = SimpleNamespace(keeper_note="keeper: " + diagnosis, state=SimpleNamespace(unreachable=[]))
    live = SimpleNamespace(refresh=lambda: [status], status_error="status: " + diagnosis, run=run,
                           touch=lambda: None)
    widgets.status_table(live, key="t")


def test_a_diagnosis_with_links_and_images_shows_as_plain_text():
    at = AppTest.from_function(_status_page, args=(HOSTILE,)).run()
    shown = [e.value for e in at.error] + [w.value for w in at.warning]
    assert len(shown) == 3, shown
    for body in shown:
        html = _as_html(body)
        assert "<a " not in html and "<img" not in html and "<strong>" not in html, html
        assert "evil.example/phish" in html and "[the fix]" in html   # the text itself stays


def test_the_watch_line_escapes_the_agents_error():
    line = watch_line({"state": "reconnecting", "last_error": HOSTILE}, now=time.time())
    assert "<a " not in _as_html(line) and "<img" not in _as_html(line)


def test_escaped_text_reads_the_same():
    assert MarkdownIt("commonmark").render(md_escape(HOSTILE)).strip() == f"<p>{_html_text(HOSTILE)}</p>"


def _html_text(text: str) -> str:
    import html
    return html.escape(text, quote=False).replace('"', "&quot;")
