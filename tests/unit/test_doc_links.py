"""Every relative link in README.md and docs/*.md leads somewhere: the file exists and, with an
anchor, the target has a heading of that slug (GitHub's: lower case, punctuation dropped, spaces
to hyphens, repeats numbered -1, -2 ...). No network: web links are not followed. And the README
names no test counts or timings, which drift; docs/testing.md keeps the measured figures."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!\\)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code: links there are not links."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link in a heading: its text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)                   # keeps letters, digits, _, -, spaces
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text(encoding="utf-8")))


def test_the_slug_is_githubs():
    assert slug("Hostile input and odd use: each case and its bound") == \
        "hostile-input-and-odd-use-each-case-and-its-bound"
    assert slug("From Python: `tfconsole.launch`") == "from-python-tfconsolelaunch"
    assert slug("README and guide promises -> the test(s) that fail when each breaks") == \
        "readme-and-guide-promises---the-tests-that-fail-when-each-breaks"
    assert slug("Where a run's files live") == "where-a-runs-files-live"


def test_links_and_headings_are_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n## Top\n\n[a](other.md#x) `[not](a.md)`\n\n```\n[nor](b.md)\n# no heading\n```\n")
    assert links(page) == ["other.md#x"]
    assert anchors(page) == {"top", "top-1"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(doc):
    broken = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):   # https:, mailto: ...: not followed here
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == [], broken


def test_every_guide_is_reachable_from_the_readme():
    readme = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    missing = [p.name for p in DOCS[1:] if p.resolve() not in readme]
    assert missing == [], f"docs not linked from README.md: {missing}"


def test_the_readme_names_no_test_counts_or_timings():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    counts = re.findall(r"\b\d[\d,]*\s+(?:tests?|passed)\b", text)
    timings = re.findall(r"~?\b\d+(?:\.\d+)?(?:-\d+)?\s*(?:min(?:utes?)?|s)\b(?=[\s,.;)])", _prose(text))
    assert counts == [] and timings == [], (counts, timings)


def test_the_readmes_two_commands_are_make_run_and_make_test():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start\n+```bash\n(.*?)```", text, re.S).group(1)
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == ["make run", "make test"]
