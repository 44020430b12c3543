"""A run's alerts on their way out: queued in the run's folder, sent by a detached sender.

Whoever records a run's end (``Run.move``: the keeper, or for a run that never restarts the
reader that settles it, the CLI or the console) queues its alert: the move is a compare-and-set
under the run's lock, so exactly one process queues each end. A restart (after a failure, a
stall, a preemption or a NaN; a host lost for good, its task moved to a spare or the run shrunk)
is the keeper's to tell, once the next attempt runs; a NaN/Inf
loss in the chief's metrics too, once per attempt. Each alert has a key, queued once. Queueing writes
one small file and starts ``python -m backend.alerts.outbox RUN_DIR`` in a session of its own,
so neither training, the keeper nor the console ever waits on a webhook, and an alert queued by
a CLI command that exits at once is still delivered. The sender holds ``sender.lock`` (one per
run), posts each pending alert in order, each POST bounded as a whole (``TIMEOUT_S``: connect,
send, status line and headers; a body that trickles is not waited for), retries a 5xx, a 429, a
timeout, a connection error or an answer that is not HTTP, and records each alert ``sent`` or
``failed`` (with why) in ``outbox.json``. The backoff (``BACKOFF_S`` doubling, ``TRIES`` tries) is
the webhook's, shared by its alerts: a receiver that is down is tried ``TRIES`` times in all, then
every alert still pending is marked failed, so a queue of alerts costs one backoff, not one each.
The queue is bounded (``MAX_EVENTS``): a run's alerts are few.
"""
from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from backend.alerts import settings as alert_settings
from backend.files import write_private

OUTBOX = "outbox.json"
LOCK = "outbox.lock"
SENDER_LOCK = "sender.lock"
SENDER_LOG = "sender.log"
MAX_EVENTS = 100
TRIES = 8
BACKOFF_S = 2.0          # 2, 4, 8 ... s between tries of the webhook: about 6 minutes in all
TIMEOUT_S = 10.0         # one POST, as a whole
REPO_ROOT = Path(__file__).resolve().parents[2]
KINDS = ("finished", "failed", "restarted", "preempted", "nan", "stall", "moved", "shrunk", "disk_full",
         "low_goodput")
NOW_TRIES = 3            # a disk-full alert, posted at once: the outbox lies on that full disk


def kind_for(phase: str, reason: str | None) -> str | None:
    """The alert for ``phase`` (None: none): a run's end (finished, failed), or "restarted"
    named by why the attempt before ended (preempted, nan, stall, or restarted)."""
    why = (reason or "").lower()
    if phase in ("finished", "failed"):   # the run's end says so, whatever the reason
        return phase
    if phase != "restarted":   # the keeper's, once the next attempt runs (``on_restart``)
        return None
    if "preempted" in why:
        return "preempted"
    if "not finite" in why or "nonfiniteloss" in why:
        return "nan"
    if why.startswith("stalled"):
        return "stall"
    return "restarted"


def event(run_id: str, kind: str, *, reason: str | None, step: int | None, attempt: int,
          phase: str, console_url: str) -> dict:
    """The alert, as a generic JSON body; ``body`` turns it into what the webhook takes."""
    link = f"{console_url.rstrip('/')}/runs"
    words = {"finished": "finished", "failed": "failed", "restarted": "failed",
             "preempted": "was preempted", "nan": "has a NaN/Inf metric", "stall": "stalled",
             "moved": "moved a lost host's task(s) to a spare", "shrunk": "shrank after losing a host",
             "disk_full": "is held: nothing can be recorded", "low_goodput": "ended with a low goodput",
             "low_goodput_live": "has a low goodput"}[kind]
    at = f" at step {step}" if step is not None else ""
    because = f": {reason}" if reason and reason != "finished" else ""
    because += f"; restarted as attempt {attempt + 1}" if phase == "restarted" else ""
    return {"run": run_id, "event": kind, "phase": phase, "attempt": attempt, "step": step,
            "reason": reason or "", "link": link, "time": time.time(),
            "text": f"tfconsole run {run_id} {words}{at} (attempt {attempt}){because}. {link}"}


def body(alert: dict, fmt: str) -> bytes:
    """Slack's incoming-webhook body ({"text": ...}, which Mattermost, Teams' and Discord's
    Slack-compatible endpoints take too), or the generic JSON alert."""
    if fmt == "slack":
        return json.dumps({"text": alert["text"]}).encode()
    return json.dumps({k: v for k, v in alert.items()}).encode()


# ---- the queue ------------------------------------------------------------------------------

def _folder(run_dir: Path) -> Path:
    folder = Path(run_dir) / alert_settings.ALERTS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[list]:
    """The outbox's entries, under its lock; written back when the block ends."""
    folder = _folder(run_dir)
    with open(folder / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = read(run_dir)
        before = json.dumps(entries)
        yield entries
        if json.dumps(entries) != before:
            write_private(folder / OUTBOX, json.dumps(entries, indent=1))


def keep_settings(run_dir: Path, settings: dict) -> None:
    """Keep the run's webhook beside its state, owner-only (nothing when it has none)."""
    if settings:
        write_private(_folder(run_dir) / alert_settings.SETTINGS, json.dumps(settings))


def read(run_dir: Path) -> list[dict]:
    """Every alert of the run with how it went: {"id", "alert", "state", "tries", "error"}."""
    try:
        data = json.loads((Path(run_dir) / alert_settings.ALERTS_DIR / OUTBOX).read_text())
    except (FileNotFoundError, ValueError):
        return []
    return data if isinstance(data, list) else []


def queue(run_dir: Path, alert: dict, *, key: str | None = None, start: bool = True) -> bool:
    """Add an alert for the sender (once per ``key``) and wake the sender; False when the run has
    no webhook, the key was queued before, or the queue is full."""
    if not alert_settings.load(run_dir):
        return False
    with _locked(run_dir) as entries:
        key = key or f"{alert['event']}-{len(entries) + 1}"
        if any(e.get("id") == key for e in entries) or len(entries) >= MAX_EVENTS:
            return False
        entries.append({"id": key, "alert": alert, "state": "pending", "tries": 0, "error": ""})
    if start:
        start_sender(run_dir)
    return True


def on_move(run_dir: Path, run_id: str, phase: str, *, reason: str | None, step: int | None,
            attempt: int, kind: str | None = None) -> bool:
    """The alert for a phase change just recorded, if it is one that alerts (``kind``: the
    caller knows it better than the reason's words)."""
    kind = kind or kind_for(phase, reason)
    found = alert_settings.load(run_dir) if kind else {}
    if not found:
        return False
    return queue(run_dir, event(run_id, kind, reason=reason, step=step, attempt=attempt, phase=phase,
                                console_url=console_link(found)), key=f"{kind}-attempt-{attempt}-{phase}")


def console_link(found: dict) -> str:
    return found.get("console_url") or os.environ.get("TFCONSOLE_URL") or alert_settings.DEFAULT_CONSOLE_URL


def on_restart(run_dir: Path, state) -> bool:
    """The keeper has started the next attempt (``state``: the run's ``RunState``): say why the
    last one ended (a failure, a stall, a preemption, a NaN) and at which step; a host lost for
    good says what became of its tasks ("moved" to a spare, or "shrunk": fewer tasks)."""
    if len(state.attempts) < 2:
        return False
    ended, started = state.attempts[-2], state.attempts[-1]
    return on_move(run_dir, state.run_id, "restarted", reason=ended.reason, step=ended.last_step,
                   attempt=ended.number, kind=membership_kind(ended, started))


def membership_kind(ended, started) -> str | None:
    """"moved" or "shrunk" when the attempt ``ended`` lost a host for good (its ``lost``) and
    ``started`` runs on a spare or on fewer tasks (their ``hosts``); None otherwise."""
    if not ended.lost:
        return None
    return "shrunk" if len(started.hosts or {}) < len(ended.hosts or {}) else "moved"


def on_nonfinite(run_dir: Path, run_id: str, *, attempt: int, step: int | None, metric: str,
                 value: float) -> bool:
    """A NaN/Inf metric seen in the chief's metrics (``metric``: "loss", or a name such as
    "worker-1 val_loss"): one alert per attempt, naming it."""
    if math.isfinite(float(value)):
        return False
    found = alert_settings.load(run_dir)
    if not found:
        return False
    return queue(run_dir, event(run_id, "nan", reason=f"{metric} is {value}", step=step, attempt=attempt,
                                phase="running", console_url=console_link(found)), key=f"nan-attempt-{attempt}")


def on_disk_full(run_dir: Path, run_id: str, *, problem: str, attempt: int, log) -> bool:
    """The console machine's disk is full (``problem`` says where): the keeper holds the run. The
    outbox lies on that disk, so this alert is not queued: it is posted now, from a thread
    (``NOW_TRIES`` tries), and ``log`` is told how it went. False when the run has no webhook."""
    found = alert_settings.load(run_dir)
    if not found:
        return False
    alert = event(run_id, "disk_full", reason=problem, step=None, attempt=attempt, phase="running",
                  console_url=console_link(found))
    threading.Thread(target=_post_now, args=(found, alert, log), daemon=True).start()
    return True


def _post_now(found: dict, alert: dict, log) -> None:
    delay = BACKOFF_S
    for _ in range(NOW_TRIES):
        ok, again, why = post(found["webhook"], body(alert, found.get("format", "slack")))
        if ok or not again:
            break
        time.sleep(delay)
        delay *= 2
    log(f"{alert['event']} alert to {alert_settings.mask(found['webhook'])}: {'sent' if ok else why}")


def pending(run_dir: Path) -> list[dict]:
    return [e for e in read(run_dir) if e.get("state") == "pending"]


# ---- the sender -----------------------------------------------------------------------------

def start_sender(run_dir: Path) -> None:
    """Start the detached sender (it exits at once if another holds the run's sender lock)."""
    folder = _folder(run_dir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    with open(folder / SENDER_LOG, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "backend.alerts.outbox", str(Path(run_dir).resolve())],
                                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    threading.Thread(target=proc.wait, daemon=True).start()   # reaped: no zombies in a console


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection for ``url`` (through the environment's proxy, as urllib would) and the
    request target to send on it."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return kind(parts.hostname, parts.port, timeout=timeout), target
    via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if parts.scheme == "https":   # a tunnel through the proxy; TLS to the webhook itself
        conn = kind(via.hostname, via.port or 8080, timeout=timeout)
        conn.set_tunnel(parts.hostname, parts.port)
        return conn, target
    return http.client.HTTPConnection(via.hostname, via.port or 8080, timeout=timeout), url


def _cut(conn: http.client.HTTPConnection, expired: threading.Event) -> None:
    """The deadline: a read that is waiting returns at once, and the try ends."""
    expired.set()
    with contextlib.suppress(OSError, AttributeError):
        conn.sock.shutdown(socket.SHUT_RDWR)


def post(url: str, data: bytes, timeout: float = TIMEOUT_S) -> tuple[bool, bool, str]:
    """One try: (delivered, worth retrying, why not). The URL never appears in the why.

    The whole try takes at most ``timeout``: a socket's timeout is per read, so a receiver that
    trickles a byte every 2 s held one POST for minutes; at the deadline the socket is shut. A
    2xx status line is the delivery: the body after it is not read."""
    expired = threading.Event()
    try:
        conn, target = _connection(url, timeout)
    except (ValueError, http.client.HTTPException) as err:   # a port that is not a number
        return False, False, f"the webhook URL cannot be used: {type(err).__name__}"
    killer = threading.Timer(timeout, _cut, args=(conn, expired))
    killer.daemon = True
    killer.start()
    try:
        conn.connect()
        if expired.is_set():
            raise TimeoutError
        conn.request("POST", target, body=data, headers={"Content-Type": "application/json",
                                                           "User-Agent": "tfconsole"})
        code = conn.getresponse().status
    except Exception as err:  # noqa: BLE001 - any failure of a try is retried; the sender must live on
        if expired.is_set() or isinstance(err, TimeoutError):
            return False, True, f"no answer within {timeout:g} s"
        if isinstance(err, http.client.HTTPException):   # a banner, a half answer: not an HTTP server
            return False, True, f"not an HTTP answer ({type(err).__name__})"
        why = getattr(err, "reason", None) or err
        return False, True, why if isinstance(why, str) else f"{type(why).__name__}: {why}"
    finally:
        killer.cancel()
        conn.close()
    if 200 <= code < 300:
        return True, False, ""
    return False, code >= 500 or code == 429, f"HTTP {code}"


def _record(run_dir: Path, entry_id: str, *, ok: bool, again: bool, why: str, tries: int) -> tuple[str, int]:
    """One try of one alert, written to the outbox: its state and tries now."""
    with _locked(run_dir) as entries:
        mine = next(e for e in entries if e["id"] == entry_id)
        mine["tries"] += 1
        mine["state"] = "sent" if ok else ("pending" if again and mine["tries"] < tries else "failed")
        mine["error"] = why
        mine["at"] = time.time()
        return mine["state"], mine["tries"]


def _give_up(run_dir: Path, why: str, failures: int) -> None:
    """The webhook failed ``failures`` tries in a row: every alert still pending fails with why."""
    with _locked(run_dir) as entries:
        for e in entries:
            if e.get("state") == "pending":
                e["state"] = "failed"
                e["error"] = e.get("error") or f"not sent: the webhook failed {failures} tries in a row ({why})"
                e["at"] = time.time()


def deliver(run_dir: Path, *, backoff_s: float = BACKOFF_S, tries: int = TRIES, timeout_s: float = TIMEOUT_S,
            log=lambda msg: print(time.strftime("%H:%M:%S"), msg, flush=True)) -> int:
    """Send every pending alert in order, with one backoff for the webhook; how many were
    delivered. A try that the receiver answers (a 2xx, or a 4xx that no retry mends) resets the
    backoff; ``tries`` failed tries in a row fail every alert left."""
    found = alert_settings.load(run_dir)
    if not found:
        return 0
    sent, failures, delay = 0, 0, backoff_s
    while (todo := pending(run_dir)):
        entry = todo[0]
        ok, again, why = post(found["webhook"], body(entry["alert"], found.get("format", "slack")), timeout_s)
        state, count = _record(run_dir, entry["id"], ok=ok, again=again, why=why, tries=tries)
        log(f"{entry['id']} to {alert_settings.mask(found['webhook'])}: {'sent' if ok else why} (try {count})")
        sent += state == "sent"
        if ok or not again:   # the receiver answered: the webhook is up
            failures, delay = 0, backoff_s
            continue
        failures += 1
        if failures >= tries:
            _give_up(run_dir, why, failures)
            log(f"the webhook failed {failures} tries in a row: {len(todo) - 1} more alert(s) not sent")
            break
        time.sleep(delay)
        delay *= 2
    return sent


def serve(run_dir: Path) -> int:
    """The sender process: deliver while alerts are pending, one sender per run."""
    folder = _folder(run_dir)
    while alert_settings.load(run_dir):   # its settings gone (the run deleted): nothing to send
        with open(folder / SENDER_LOCK, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0   # the sender at work sees this alert: it looks again after its lock
            deliver(run_dir)
        # An alert queued while we held the lock was left to us by its own sender, which exited.
        if not pending(run_dir):
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
