"""Text from jobs and hosts, shown as text: Streamlit's st.error, st.warning and st.caption read
their body as Markdown, so a log line with ``[x](http://...)`` or ``![](http://...)`` became a
link or an image fetched from anywhere. Every such text goes through ``md_escape``."""
from __future__ import annotations

import re
from pathlib import Path

# Every ASCII punctuation character may be backslash-escaped in CommonMark, and an escaped one is
# shown as itself. ':' too: Streamlit reads ":red[...]" and ":material/icon:" directives.
_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&=\"'])")


def md_escape(text: object) -> str:
    """``text`` as Markdown that renders to exactly that text: no link, image, emphasis or math."""
    return _SPECIAL.sub(r"\\\1", str(text))


def home_short(path: object) -> str:
    """``path`` under the home folder written ``~/...``, as shells and ssh write it (shorter; the
    same folder reads the same for everyone whose home holds it); other paths as they are."""
    full = Path(str(path))
    try:
        inside = full.relative_to(Path.home())
    except ValueError:
        return str(full)
    return "~" if inside == Path(".") else f"~/{inside}"
