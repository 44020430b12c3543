"""Where a run's alerts go: a webhook URL and its body's format, kept like a secret.

A job file names them (``alerts: {webhook: URL, format: slack|json}``); without that, the
console's own: ``$TFCONSOLE_WEBHOOK`` (and ``$TFCONSOLE_WEBHOOK_FORMAT``), else
``<runs folder>/webhook.json``, a file its owner alone may read. At launch the choice is written
to the run's ``alerts/settings.json`` (0600) and never into the run's state, its record or any
output: a webhook URL is a credential (Slack's carry their token in the path), so it is only ever
shown masked (``mask``).
"""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from backend.errors import ConsoleError, SpecError

FORMATS = ("slack", "json")
CONSOLE_FILE = "webhook.json"     # in the runs folder: the console's webhook
ALERTS_DIR = "alerts"             # in a run's folder
SETTINGS = "settings.json"
DEFAULT_CONSOLE_URL = "http://127.0.0.1:8501"
KEYS = ("webhook", "format", "console_url", "goodput_below", "goodput_after_s")
GOODPUT_AFTER_S = 600.0   # a live run's goodput is judged once it has run this long (start-up dominates before)


def parse(value: object, where: str = "alerts") -> dict:
    """The job file's ``alerts`` block, checked: {"webhook", "format"[, "console_url",
    "goodput_below", "goodput_after_s"]}; {} for none. ``goodput_below``: a share (0-1); a run
    whose goodput is under it sends one more alert when it ends, and one while it lives once it
    has run ``goodput_after_s`` (default GOODPUT_AFTER_S) and its goodput is read under it
    (docs/goodput.md)."""
    fix = "Write it as alerts: {webhook: https://..., format: slack} (format slack or json)."
    if value is None or value == {}:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(where, f"expected a mapping, got {type(value).__name__}", fix)
    unknown = [str(k) for k in value if k not in KEYS]
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", f"unknown key {unknown[0]!r}", f"Use only: {', '.join(KEYS)}.")
    out = {"webhook": _url(value.get("webhook"), f"{where}.webhook"),
           "format": value.get("format", "slack")}
    if out["format"] not in FORMATS:
        raise SpecError(f"{where}.format", f"{out['format']!r} is not a format", "Use slack or json.")
    if value.get("console_url") is not None:
        out["console_url"] = _url(value["console_url"], f"{where}.console_url")
    below = value.get("goodput_below")
    if below is not None:
        if isinstance(below, bool) or not isinstance(below, (int, float)) or not 0 < below < 1:
            raise SpecError(f"{where}.goodput_below", f"{below!r} is not a share between 0 and 1",
                            "Give the goodput under which to alert as a share, e.g. goodput_below: 0.6 (60 %).")
        out["goodput_below"] = float(below)
    after = value.get("goodput_after_s")
    if after is not None:
        if below is None:
            raise SpecError(f"{where}.goodput_after_s", "is given without goodput_below",
                            "Give goodput_below too (e.g. goodput_below: 0.6), or leave goodput_after_s out.")
        if isinstance(after, bool) or not isinstance(after, (int, float)) or not 1 <= after <= 7 * 86400:
            raise SpecError(f"{where}.goodput_after_s", f"{after!r} is not a number of seconds from 1 to a week",
                            "Give how long a run lives before its goodput is judged, e.g. goodput_after_s: 600.")
        out["goodput_after_s"] = float(after)
    return out


def _url(value: object, where: str) -> str:
    # Never echo the value: it may be the secret itself.
    if not isinstance(value, str) or any(c.isspace() or ord(c) < 32 for c in value):
        raise SpecError(where, "expected an http(s) URL", "Give the webhook's full URL, https://...")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(where, "expected an http(s) URL", "Give the webhook's full URL, https://...")
    return value


def mask(url: str | None) -> str:
    """What may be shown of a webhook URL: its scheme and host, never its path or query."""
    if not url:
        return ""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}/***"


def console_settings(runs_root: Path) -> dict:
    """The console's webhook, or {}: ``$TFCONSOLE_WEBHOOK``, else ``<runs>/webhook.json``."""
    url = os.environ.get("TFCONSOLE_WEBHOOK")
    if url:
        return parse({"webhook": url, "format": os.environ.get("TFCONSOLE_WEBHOOK_FORMAT", "slack")},
                     "$TFCONSOLE_WEBHOOK")
    path = Path(runs_root) / CONSOLE_FILE
    if not path.exists():
        return {}
    if not path.is_file():   # a run named webhook.json, from before such ids were refused
        raise ConsoleError(f"{path} is a folder, not the console's webhook file",
                           "Move that folder out of the runs folder (it may hold a run's files), then launch again.")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConsoleError(f"{path} may be read by others, and it holds a webhook URL (a secret)",
                           f"Make it the owner's alone: chmod 600 {path}.")
    try:
        return parse(json.loads(path.read_text()), str(path))
    except ValueError:
        raise ConsoleError(f"{path} is not JSON", 'Write it as {"webhook": "https://...", "format": "slack"}.') from None


def resolve(job_alerts: Mapping | None, runs_root: Path) -> dict:
    """The run's alerts: the job's own, else the console's; {} when there are none."""
    return dict(job_alerts) if job_alerts else console_settings(runs_root)


def load(run_dir: Path) -> dict:
    """The run's alerts as launch kept them, or {} (none, or unreadable)."""
    try:
        data = json.loads((Path(run_dir) / ALERTS_DIR / SETTINGS).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("webhook") else {}


def shown(settings: Mapping) -> dict:
    """The settings as a page or `runs show` may print them: the URL masked."""
    if not settings:
        return {}
    return {**settings, "webhook": mask(settings.get("webhook")),
            **({"console_url": settings["console_url"]} if settings.get("console_url") else {})}
