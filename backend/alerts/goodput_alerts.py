"""The alerts about a run's goodput (docs/goodput.md): ``goodput_below`` in the job's alerts asks
for one when the run ends under it and one while it lives, once it has run ``goodput_after_s``.
Queued like every alert (``outbox.queue``), each once per run."""
from __future__ import annotations

from pathlib import Path

from backend.alerts import settings as alert_settings
from backend.alerts.outbox import console_link, event, queue


def on_low_goodput(run_dir: Path, run_id: str, *, phase: str, share: float | None, said: str,
                   attempt: int, step: int | None) -> bool:
    """A run that ended with its goodput ``share`` under the job's ``goodput_below``: one alert,
    ``said`` being the goodput's line (its share and largest causes)."""
    found = alert_settings.load(run_dir)
    below = found.get("goodput_below") if found else None
    if below is None or share is None or share >= below:
        return False
    return queue(run_dir, event(run_id, "low_goodput", reason=f"{said} (alert below {below:.0%})", step=step,
                                attempt=attempt, phase=phase, console_url=console_link(found)),
                 key="low-goodput")


def on_low_goodput_live(run_dir: Path, run_id: str, *, share: float | None, said: str,
                        attempt: int, step: int | None) -> bool:
    """A live run whose goodput ``share`` is under the job's ``goodput_below`` once it has run
    ``goodput_after_s``: one alert for the run's whole life (the end's own alert still comes)."""
    found = alert_settings.load(run_dir)
    below = found.get("goodput_below") if found else None
    if below is None or share is None or share >= below:
        return False
    return queue(run_dir, event(run_id, "low_goodput_live", reason=f"{said} (alert below {below:.0%})",
                                step=step, attempt=attempt, phase="running", console_url=console_link(found)),
                 key="low-goodput-live")


def goodput_watch(run_dir: Path) -> tuple[float, float] | None:
    """(goodput_below, goodput_after_s) where the run's alerts ask about its goodput, else None."""
    found = alert_settings.load(run_dir)
    if not found or found.get("goodput_below") is None:
        return None
    return found["goodput_below"], float(found.get("goodput_after_s", alert_settings.GOODPUT_AFTER_S))


def wants_goodput(run_dir: Path) -> bool:
    """Whether the run's alerts ask about its goodput (cheap: its settings file only)."""
    found = alert_settings.load(run_dir)
    return bool(found and found.get("goodput_below") is not None)
