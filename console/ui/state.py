"""Session state, initialised in one place, and the long-lived objects every session shares.

Per browser session (``st.session_state``): the cluster being edited, the job form, the current
run id and the results of the last preflight. Shared by all sessions (``st.cache_resource``): one
``Registry`` per runs folder, holding each run's handle, monitor and metrics store by run id.

Streamlit drops a widget's state while its page is not shown, so the launch form's values are
also kept under ``launch_form`` (not a widget key): its widgets take their default from there and
copy each change back (``kept``), and so come back as the operator left them.
"""
from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass

import streamlit as st

from backend.checkpoints import CHOICE_TTL_S, Hold
from backend.errors import ArtifactError, ConsoleError
from backend.client.harness.contract import layout
from backend.hosts.ssh import SSHOptions
from backend.runs.store import RunStore, default_root
from backend.config.spec import DEFAULT_PORTS, cluster_to_dict, default_cluster, default_job, job_to_dict
from console import actions, slurm_form
from console.forms import cluster_rows, examples, launch_form
from console.paths import EXAMPLES


# Every session key, with how to build its first value.
DEFAULTS = {
    "cluster_rows": lambda: first_cluster_rows(),
    "cluster_current": lambda: None,     # the edited rows, as other pages read them
    "cluster_version": lambda: 0,        # bumped to give the table editor fresh rows
    "launch_form": lambda: first_launch_form(),   # widget key -> value
    "run_id": lambda: None,              # the current run
    "chosen_run_id": lambda: None,       # the run picked on the Runs page: it stays current
    "action_run_id": lambda: None,       # the run of this session's last Start or Stop
    "preflight": lambda: None,           # [row dict] of the last preflight
    "host_key": lambda: None,            # {"host", "port", "fingerprint", "key_type"} to confirm
    "confirm_stop": lambda: False,
    "confirm_restore": lambda: None,     # a PendingRestore while Restore waits for Yes
    "last_export": lambda: None,
    "ssh_aliases": lambda: [],
    "cluster_kind": lambda: slurm_form.KINDS[0],   # "SSH hosts" (the table) or "Slurm" (the form)
    "slurm_values": lambda: slurm_form.default_values(sys.executable),
}


def free_ports(first: int = DEFAULT_PORTS[0], count: int = len(DEFAULT_PORTS)) -> list[int]:
    """The built-in default's TF ports: the usual ones, or the next free ones when another run
    (a second console, a test) holds them, so Start works out of the box."""
    ports, port = [], first
    while len(ports) < count and port < 65535:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as gRPC binds: TIME_WAIT is free
            try:
                s.bind(("127.0.0.1", port))
                ports.append(port)
            except OSError:
                pass
        port += 1
    return ports


def first_cluster_rows() -> list[dict]:
    """A new session's task table: the cluster of the newest live run (the run its pages show),
    else the built-in default. After a console restart the Launch and Cluster pages then name the
    hosts that train, and Start after Stop goes to them again. A live Slurm run keeps the default
    table: its cluster is the Slurm form's, not rows."""
    live = _newest_live()
    if live and "tasks" in live.cluster:
        return cluster_rows(live.cluster)
    return cluster_rows(cluster_to_dict(default_cluster(sys.executable, free_ports())))


def first_launch_form() -> dict:
    """A new session's job form: the newest live run's job (what its pages show), else the
    built-in default, as ``first_cluster_rows`` does for the task table."""
    live = _newest_live()
    job = live.job if live and live.job else job_to_dict(default_job(EXAMPLES))
    return launch_form(job, tuple(examples(EXAMPLES)))


def _newest_live():
    """The newest live run's saved state (the run a new session's pages show), or None."""
    return next((s for s in run_store().list() if s.live), None)


def init() -> None:
    for key, make in DEFAULTS.items():
        if key not in st.session_state:
            st.session_state[key] = make()


def keep(key: str) -> None:
    """on_change of a launch-form widget: copy its value where it survives a page switch."""
    st.session_state.launch_form[key] = st.session_state[key]


def kept(key: str) -> dict:
    """Keyword arguments for a launch-form widget: its key and the ``keep`` callback."""
    return {"key": key, "on_change": keep, "args": (key,)}


@st.cache_resource(show_spinner=False)
def _registry(root: str):
    from console.live_run import Registry
    return Registry(RunStore(root), SSHOptions())


def registry():
    """The shared registry for the runs folder in use ($TFCONSOLE_RUNS or ./runs)."""
    return _registry(str(default_root()))


def run_store() -> RunStore:
    return registry().store


def current_run():
    """The LiveRun the session works on, or None.

    Found from the runs folder, not only from the session: a new session, or one whose run has
    ended while a newer run is live (started by another page, tab or the CLI), takes the newest
    live run (else the newest run), so a reload, an app restart or a click away from the Launch
    page while it started a run still shows that run.
    """
    init()
    run_id = st.session_state.run_id
    action = registry().actions.get(run_id)
    states = run_store().list()
    if action is not None and not action.done and action.kind == "start" \
            and not any(s.run_id == run_id for s in states):
        return None   # its record is not written yet: pages show the action's progress
    live = [s for s in states if s.live]
    mine = next((s for s in states if s.run_id == run_id), None)
    chosen = mine is not None and run_id == st.session_state.chosen_run_id
    if mine is None or (not chosen and not mine.live and live and live[0].created > mine.created):
        pick = (live or states or [None])[0]
        if pick is None:
            return None
        run_id = st.session_state.run_id = pick.run_id
    try:
        return registry().get(run_id)
    except ConsoleError as err:
        st.error(str(err))
        st.session_state.run_id = None
        return None


def choose_run(run_id: str):
    """The operator's pick on the Runs page: it stays the current run for this session, even an
    ended run while a newer one is live (else its Monitor and Checkpoints could not be reached).
    A Start in this session makes its new run current again (``run_id`` changes)."""
    init()
    st.session_state.run_id = st.session_state.chosen_run_id = run_id
    return current_run()


# ---- a restore waiting for its confirmation -------------------------------------------------

EXPIRY_MARGIN_S = 30.0   # a restore reads and moves checkpoints before its hold is taken over


@dataclass(frozen=True)
class PendingRestore:
    """The step held for a restore between the Restore press and Yes: which run, since when."""
    run_id: str
    hold: Hold
    at: float   # when the hold was taken (this machine's clock: only the elapsed time counts)

    @property
    def step(self) -> int:
        return self.hold.step

    def expired(self, now: float | None = None) -> bool:
        """The chief drops the hold after CHOICE_TTL_S; with the margin, before that happens."""
        return (now if now is not None else time.time()) - self.at >= CHOICE_TTL_S - EXPIRY_MARGIN_S


def hold_for_restore(live, step) -> PendingRestore:
    """Release the hold of an earlier Restore press (a second press must not leak it), then hold
    ``step`` until the operator confirms."""
    release_pending_restore()
    hold = actions.hold_for_restore(live, step)
    pending = st.session_state.confirm_restore = PendingRestore(live.run_id, hold, time.time())
    return pending


def take_pending_restore() -> PendingRestore:
    """The confirmed restore's hold, handed over to the restore (the session no longer holds it).
    An expired hold is released and refused with what to do next: the step may be gone."""
    pending = st.session_state.confirm_restore
    if pending is None:
        raise ArtifactError("no step is held for a restore", "Pick the checkpoint again, then press Restore.")
    if pending.expired():
        release_pending_restore()
        raise ArtifactError(f"the hold on step {pending.step} expired (a choice is held for "
                            f"{CHOICE_TTL_S / 60:.0f} min) and retention may have removed it",
                            "Pick the checkpoint again, then press Restore.")
    st.session_state.confirm_restore = None
    return pending


def release_pending_restore() -> None:
    """Give retention back the step a Restore press held: on Cancel, a second press, or when
    the operator leaves the Checkpoints page without answering."""
    init()
    pending = st.session_state.confirm_restore
    st.session_state.confirm_restore = None
    if not isinstance(pending, PendingRestore):
        return
    try:
        actions.release_hold(registry().get(pending.run_id), pending.hold)
    except ConsoleError:
        pass   # the run is gone: its hold expires by itself (CHOICE_TTL_S)


def recorded(run_id: str) -> bool:
    """Whether the run's record is written (a start writes it before its tasks start)."""
    return (run_store().path(run_id) / layout.STATE).exists()


def current_action():
    """This session's last Start or Stop (running in the background), or None."""
    init()
    return registry().actions.get(st.session_state.action_run_id)


def cluster_rows_now() -> list[dict]:
    """The cluster table as last edited (the built-in default until someone edits it)."""
    init()
    return st.session_state.cluster_current or st.session_state.cluster_rows


def cluster_choice():
    """What Start launches on: the task table's rows, or the ``SlurmSpec`` when the Cluster page's
    choice is "Slurm" (None while its form has errors)."""
    init()
    if st.session_state.cluster_kind != "Slurm":
        return cluster_rows_now()
    return slurm_form.build(st.session_state.slurm_values)[0]


def redraw_cluster_rows(rows: list[dict]) -> None:
    """Start the table editor again from the rows as edited (every typed value kept), so its
    problem column can show the problems of those rows. The preflight result stays, as it does
    for any edit."""
    st.session_state.cluster_rows = rows
    st.session_state.cluster_current = rows
    st.session_state.cluster_version += 1


def set_cluster_rows(rows: list[dict]) -> None:
    """Replace the table's rows (an import): the editor gets a new key and starts from them."""
    st.session_state.cluster_rows = rows
    st.session_state.cluster_current = rows
    st.session_state.cluster_version += 1
    st.session_state.preflight = None
