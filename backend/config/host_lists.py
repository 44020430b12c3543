"""Host lists brought from elsewhere: an MPI-style hostfile's slots and the aliases of an
ssh_config, for the Cluster page's imports."""
from __future__ import annotations

import re
from pathlib import Path

from backend.config.values import DIGITS, parse_host, show_value, whole
from backend.errors import SpecError

def hostfile_slots(text: object) -> tuple[list[tuple[str, int]], list[SpecError]]:
    """(host, slot index on that host) for every slot in a hostfile, and the bad lines."""
    if not isinstance(text, str):
        return [], [SpecError("hostfile", f"expected text, got {show_value(text)}", "Paste the hostfile's text.")]
    fix = "Write each line as 'host slots=N' (N from 1 to 1024); '#' starts a comment."
    slots, errors, used = [], [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"line {number}"
        count = 1
        for word in words[1:]:
            key, _, val = word.partition("=")
            count = whole(val) if key == "slots" and DIGITS.fullmatch(val) else None
            if count is None or not 1 <= count <= 1024:
                errors.append(SpecError(where, f"cannot read {show_value(word)}", fix))
                break
        try:
            host = parse_host(words[0], where)
        except SpecError as err:
            errors.append(err)
            continue
        if count is None or not 1 <= count <= 1024:
            continue
        first = used.get(host, 0)
        slots += [(host, first + k) for k in range(count)]
        used[host] = first + count
    return slots, errors


_HOST_LINE = re.compile(r"\s*host(?:\s*=\s*|\s+)(.*)", re.IGNORECASE)


def ssh_config_aliases(path: str | Path) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        raise SpecError("file", f"cannot read {path}: {getattr(err, 'strerror', None) or err}",
                        "Check the path and its permissions.") from None
    aliases: list[str] = []
    for line in text.splitlines():
        match = _HOST_LINE.fullmatch(line.split("#", 1)[0])
        for word in (match.group(1).split() if match else []):
            word = word.strip("\"'")
            if any(c in word for c in "*?!"):
                continue  # patterns match many hosts; only a concrete alias can be a task's host
            try:
                alias = parse_host(word, "host")
            except SpecError:
                continue
            if alias not in aliases:
                aliases.append(alias)
    return aliases
