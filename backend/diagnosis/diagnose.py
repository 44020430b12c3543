"""Explain a failed worker's log in plain words. Standard library only (and the harness's layout).

``diagnose(log_text)`` looks for failures we know (checked on TF 2.21 / Keras 3.15) and returns
one explanation ending with what to do, or for any other traceback its last exception line, or
None when the log shows no failure.
"""
from __future__ import annotations

import re

from backend.client.harness.contract import layout

_KERAS_FIT = re.compile(r"Attempt to convert a value \(PerReplica")
_PEER_DIED = re.compile(r"Collective ops is aborted|UnavailableError|"
                        r"DeadlineExceededError.*[Cc]ollective")
_OUTCOME = re.compile(r"HARNESS (DONE|FAILED)")
# A worker whose own heartbeats to the coordination service (run by the chief) timed out: it lost
# the chief, as the chief lost it when the link between them is cut (docs/facts.md #19's twin).
_HEARTBEAT_LOST = re.compile(r"(?:DeadlineExceeded|DEADLINE_EXCEEDED)[^\n]*[Hh]eartbeat|"
                             r"[Hh]eartbeat[^\n]*(?:DeadlineExceeded|DEADLINE_EXCEEDED)")
# TensorFlow's coordination service (TF 2.21, docs/facts.md #19) when a peer is alive but silent
# (frozen, SIGSTOPped): "The following tasks are unhealthy (stopped sending heartbeats):" and
# then one "/job:worker/replica:0/task:1" line per task.
_UNHEALTHY = re.compile(r"tasks are unhealthy \(stopped sending heartbeats\):\s*\n"
                        r"((?:\s*/job:\w+/replica:\d+/task:\d+\s*\n?)+)")
_TF_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
# harness/deadline.py: faulthandler's header when no step finished for collective_timeout_s.
_STEP_TIMEOUT = re.compile(r"Timeout \((\d+):(\d\d):(\d\d)(?:\.\d+)?\)!")
_HARNESS_FAILED = re.compile(r"HARNESS FAILED: (.+)$", re.M)
# harness/startup.py's line when peers stayed unreachable for startup_timeout_s.
_STARTUP = re.compile(r"HARNESS FAILED: (?:\w+: )?cluster start-up failed after (\S+ s) "
                      r"\(startup_timeout_s[^)]*\): (.+)$", re.M)
# TensorFlow's own words when a collective cannot resolve a peer's TF_CONFIG address.
_TF_UNRESOLVED = re.compile(r"errors resolving (\S+?):? \[.*?(Name or service not known|"
                            r"Temporary failure in name resolution|No address associated)")
# harness/preempt.py's line when no save finished within preempt_grace_s of the signal, and the
# harness's last line once the save did finish (late or not).
_GRACE = re.compile(r"PREEMPT GRACE EXCEEDED: no checkpoint saved within (\S+) s")
_PREEMPT_SAVED = "HARNESS PREEMPTED: saved at step"
# "SomeError: text" or "package.module.SomeError: text" at the start of a line.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)"
                             r"(?::.*)?$")

# A full disk: Python's OSError ("[Errno 28] No space left on device: '/path'") or TensorFlow's
# ("/path/ckpt-10_temp/part-...; No space left on device [Op:SaveV2]").
_NO_SPACE = re.compile(r"No space left on device|\[Errno 28\]|\bENOSPC\b")
_NO_SPACE_PATH = re.compile(r"(/[^\s;'\"]+)'?;? No space left on device|"
                            r"No space left on device: '?(/[^'\s]+)")
DISK_FULL_HEAD = "Disk full"   # ``on_host`` names the host after it
DISK_FULL = ("Disk full (no space left on device): free space in {folder} and on the rest of its disk "
             "(old checkpoints, exports, logs), or give the task a workdir on a bigger disk; then "
             "resume from the last complete checkpoint.")

KERAS_FIT = (
    "Keras 3 model.fit does not work under MultiWorkerMirroredStrategy: it fails with "
    "'Attempt to convert a value (PerReplica ...)' (keras-team/keras#20585). Train with this "
    "console's harness (a custom loop: write a job module, see docs/job-contract.md), or use "
    "tf_keras (Keras 2) in a bring-your-own script and report losses with MetricsReporter.")
PEER_DIED = (
    "A peer worker died or became unreachable, so the collective operation was aborted "
    "(UnavailableError: Collective ops is aborted). This worker is a casualty: open the other "
    "workers' logs to find the one that failed first, fix it, and restart or resume the run.")
HEARTBEAT_LOST = (
    "This worker's heartbeats to the cluster's coordination service (on the chief) timed out "
    "(DeadlineExceededError): it lost the chief, through a cut in the network between them or a "
    "chief that stopped answering. This worker is a casualty of that link: check the network "
    "between the hosts (TensorFlow's ports, a firewall), then restart or resume the run.")
# A casualty of a peer that stopped sending heartbeats: the diagnosis names that peer, so the
# run's reason can blame it (``silent_peers`` reads the names back; outcome.py decides).
SILENT_PEER_HEAD = "TensorFlow says a peer stopped sending heartbeats: "
SILENT_PEER = (
    SILENT_PEER_HEAD + "{tasks}. It is hung (frozen, stopped, or cut off by the network) but "
    "holds its connections, so this worker's collective was aborted (UnavailableError). This "
    "worker is a casualty: while {tasks} still runs, see where it is stuck "
    "(`python -m backend stacks RUN`), then restart or resume the run.")

STEP_TIMEOUT = (
    "No training step finished for {seconds} s (collective_timeout_s, plus up to 1 s), so this "
    "worker gave up waiting in a collective: a peer stopped answering (hung, stopped, or cut off "
    "by the network). The Python stacks of this worker at that moment follow the 'Timeout' line in "
    "its log. Open the other workers' logs; if steps are really this slow (a long checkpoint save), "
    "raise collective_timeout_s.")

PREEMPT_LATE = (
    "Preempted, but not saved within the grace of {grace} s (preempt_grace_s): the process ended "
    "before its save finished. That save is incomplete and never listed; the previous checkpoint "
    "stays usable and a restart resumes from it. Save sooner (a lower log_every, a smaller "
    "checkpoint) or give the save more time (preempt_grace_s, Slurm's --signal lead, KillWait).")


# Diagnoses of a bounded cluster start-up (harness/startup.py) begin with one of these. A name
# that does not resolve from a worker fails the same way on every restart; a peer that did not
# answer in time may have crashed, which a restart can cure.
STARTUP_UNREACHABLE = "Cluster start-up failed: a peer's address does not resolve"
STARTUP_TIMEOUT = "Cluster start-up failed: a peer did not answer in time"
_ADDRESS_FIX = (
    "Every worker dials the addresses in TF_CONFIG: use a HostName in ~/.ssh/config that the "
    "workers can resolve too, or set the task's address (Cluster page, address column) to a name "
    "or IP they can reach; `python -m backend preflight` checks this from every worker.")


def _startup(log_text: str) -> str | None:
    hits = _STARTUP.findall(log_text)
    tf = _TF_UNRESOLVED.search(log_text)
    if not hits and tf:
        return (f"{STARTUP_UNREACHABLE} from this worker (TensorFlow could not resolve {tf.group(1)}). "
                f"A restart cannot fix this. {_ADDRESS_FIX}")
    if not hits:
        return None
    after, waiting = hits[-1]
    if "does not resolve" in waiting:
        return f"{STARTUP_UNREACHABLE} from this worker ({waiting.strip()}). A restart cannot fix this. {_ADDRESS_FIX}"
    return (f"{STARTUP_TIMEOUT} ({after}: {waiting.strip()}). Open that peer's log: it may have failed "
            f"to start. If it runs, check the network between them. {_ADDRESS_FIX}")


def silent_peers_in_log(log_text: str) -> list[str]:
    """The tasks (``worker-1``) TensorFlow's last heartbeat error in ``log_text`` names, if any."""
    hits = _UNHEALTHY.findall(log_text)
    return list(dict.fromkeys(f"{job}-{i}" for job, i in _TF_TASK.findall(hits[-1]))) if hits else []


def silent_peers(diagnosis: str | None) -> list[str]:
    """The peers a ``SILENT_PEER`` diagnosis names; [] for any other diagnosis."""
    if not (diagnosis or "").startswith(SILENT_PEER_HEAD):
        return []
    return diagnosis[len(SILENT_PEER_HEAD):].split(". ", 1)[0].split(", ")


def casualty(diagnosis: str | None) -> bool:
    """Whether a task failed only because a peer did (died, or stopped answering)."""
    return diagnosis in (PEER_DIED, HEARTBEAT_LOST) or bool(silent_peers(diagnosis))


def current_attempt(log_text: str) -> str:
    """The part of a task's log written by its latest attempt (all of it when unmarked)."""
    at = log_text.rfind(layout.ATTEMPT_BANNER)
    return log_text[at:] if at >= 0 else log_text


def permanent(reason: str) -> bool:
    """Whether a failure will happen again however often the job restarts (so none is tried)."""
    # Reasons carry the diagnosis, maybe shortened.
    return KERAS_FIT[:60] in reason or STARTUP_UNREACHABLE in reason


def disk_full(text: str) -> str | None:
    """The ``DISK_FULL`` explanation when ``text`` (an error, a log's last exception) says the disk
    is full, naming the folder to free (``full_folder``). None otherwise."""
    folder = full_folder(text)
    return None if folder is None else DISK_FULL.format(folder=folder)


def full_folder(text: str, *, unknown: str | None = None) -> str | None:
    """When ``text`` says the disk is full: the folder the failed write was in, above the temporary
    folder of a checkpoint (``ckpt-10_temp``) or an export (``.tmp-<name>``); ``unknown`` (else
    "the task's run folder") when it names no path. None when it does not say so."""
    if not _NO_SPACE.search(text or ""):
        return None
    found = _NO_SPACE_PATH.search(text)
    return _folder_to_free(found.group(1) or found.group(2)) if found else unknown or "the task's run folder"


def _folder_to_free(path: str) -> str:
    parts = path.rstrip("/").split("/")
    for i, part in enumerate(parts):
        if part.endswith("_temp") or part.startswith(".tmp-"):
            return "/".join(parts[:i]) or "/"
    return "/".join(parts[:-1]) or "/"


def on_host(explanation: str, host: str) -> str:
    """An explanation that names no host (``DISK_FULL``), with the host it happened on."""
    if explanation.startswith(DISK_FULL_HEAD):
        return f"disk full on {host}{explanation[len(DISK_FULL_HEAD):]}"
    return explanation


def _last_exception_line(text: str) -> str | None:
    if "Traceback (most recent call last)" not in text:
        return None
    tail = text[text.rindex("Traceback (most recent call last)"):]
    hits = [ln.strip() for ln in tail.splitlines() if _EXCEPTION_LINE.match(ln.strip())]
    return hits[-1] if hits else None


def _preempt_late(log_text: str) -> str | None:
    """A preemption's kill that came before the save finished: the previous checkpoint counts."""
    hits = list(_GRACE.finditer(log_text))
    if not hits or _PREEMPT_SAVED in log_text[hits[-1].end():]:
        return None
    return PREEMPT_LATE.format(grace=hits[-1].group(1))


def diagnose(log_text: str) -> str | None:
    """Return a plain-words explanation of the failure in ``log_text``, or None."""
    if not log_text:
        return None
    outcomes = _OUTCOME.findall(log_text)
    if outcomes and outcomes[-1] == "DONE":
        return None   # the harness's last attempt in this log finished well
    if _KERAS_FIT.search(log_text):
        return KERAS_FIT
    late = _preempt_late(log_text)
    if late:
        return late
    startup = _startup(log_text)
    if startup:
        return startup
    timeout = _STEP_TIMEOUT.findall(log_text)
    if timeout:
        h, m, sec = (int(x) for x in timeout[-1])
        return STEP_TIMEOUT.format(seconds=h * 3600 + m * 60 + sec - 1)
    last = _last_exception_line(log_text)
    failed = _HARNESS_FAILED.findall(log_text)
    full = disk_full(last or (failed[-1] if failed else ""))   # what ended it, not an old warning
    if full:
        return full
    silent = silent_peers_in_log(log_text)
    if silent:
        return SILENT_PEER.format(tasks=", ".join(silent))
    if _HEARTBEAT_LOST.search(log_text):
        return HEARTBEAT_LOST
    if _PEER_DIED.search(log_text):
        return PEER_DIED
    if last:
        return f"The worker stopped with an error: {last}"
    if failed:
        return f"The worker stopped with an error: {failed[-1].strip()}"
    return None
