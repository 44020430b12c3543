"""Shared fixtures. Real parts only; a part missing in CI (CI truthy) fails the run.

The whole session runs in a private HOME (``pytest_configure`` below): nothing touches the real
``~/tfconsole``, ``~/.ssh`` or ``./runs``. SSH fixtures, from plain to operator-style:

- ``ssh_hosts``: real sshd on 127.0.0.2 and 127.0.0.3 (session); ``ssh_options``/``ssh_cluster``
  reach them by address with an explicit key and a private known_hosts.
- ``operator_ssh``: the private HOME's ``~/.ssh`` (tests/ssh_home.py) with aliases ``h2`` and
  ``h3`` for those hosts, ``User``, ``IdentityFile`` and a known_hosts that trusts them.
  ``operator_ssh.add(alias, host)`` names and trusts another host.
- ``alias_cluster``: chief ``h2``, worker ``h3``, nothing but the aliases: ``SSHOptions()`` defaults.
- ``jump_host``: ``h5`` is reachable only through the jump host ``h4`` (``ProxyJump h4`` in
  ``~/.ssh/config``); both live in a private network namespace (rig/netns.py) and a direct
  connection to ``h5`` is refused.
"""
from __future__ import annotations

import fcntl
import gc
import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rig import netns, sshd
from tests import timeline
from tests.ssh_home import OperatorSSH

ROOT = Path(__file__).resolve().parents[1]
TIMELINE = timeline.DEFAULT   # a line per test (pytest_runtest_protocol)


def truthy(value: str | None) -> bool:
    """CI services set CI=true, CI=1 or CI=yes; any of them means "in CI"."""
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


IN_CI = truthy(os.environ.get("CI"))
# Set by pytest_configure before any test module is imported.
HOME = Path(os.environ.get("HOME", "~"))
_PRIVATE = ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
            "XDG_STATE_HOME", "TFCONSOLE_RUNS")


# Everything a test starts (a task, a keeper, a CLI; the test sshd's sessions by SetEnv) gets
# this session's own TMPDIR, so what a run leaves in its host's temp folder is this session's to
# see (pytest_sessionfinish). The test processes keep the system's (tempfile.tempdir): TensorFlow
# imported in a test removes its files at exit, after the check.
TEST_TMPDIR = "TFCONSOLE_TEST_TMPDIR"
_SYSTEM_TMP = "TFCONSOLE_TEST_SYSTEM_TMP"
AUTOGRAPH = "__autograph_generated_file*"


def _private_tmpdir() -> None:
    os.environ.setdefault(_SYSTEM_TMP, tempfile.gettempdir())   # the controller's, before ours
    tempfile.tempdir = os.environ[_SYSTEM_TMP]
    if TEST_TMPDIR not in os.environ:   # the controller (xdist workers and nested runs inherit it)
        os.environ[TEST_TMPDIR] = tempfile.mkdtemp(prefix="tfconsole-test-tmp-")
        os.environ["TFCONSOLE_TEST_TMP_OWNER"] = str(os.getpid())
    os.environ["TMPDIR"] = os.environ[TEST_TMPDIR]


def autograph_files() -> set[Path]:
    """TensorFlow's autograph files in the temp folder a run's hosts got from this session."""
    return set(Path(os.environ[TEST_TMPDIR]).glob(AUTOGRAPH))


def pytest_configure(config) -> None:
    """A private HOME, runs folder and TMPDIR for the whole session, set before anything reads them."""
    global HOME
    _private_tmpdir()
    HOME = Path(tempfile.mkdtemp(prefix="tfconsole-test-home-"))
    for var in _PRIVATE:   # the real agent, XDG folders and runs folder stay out of the tests
        os.environ.pop(var, None)
    os.environ["HOME"] = str(HOME)
    os.environ["TFCONSOLE_RUNS"] = str(HOME / "runs")
    if not hasattr(config, "workerinput"):   # the controller: a new timeline for this session
        TIMELINE.unlink(missing_ok=True)


# Fixtures that start real TensorFlow training (the harness's launcher, a shared finished run, a
# console in a browser): a test that uses one is `slow`, whether or not it says so itself.
SLOW_FIXTURES = {"launcher", "trained_run", "finished_run", "on_finished", "two_ssh_runs", "server",
                 "ssh_console", "any_cluster"}


# `make test` spreads tests over two processes (pytest-xdist, --dist loadgroup). Each process
# builds its own session fixtures, so tests that share a costly one go to one process: the Slurm
# cluster (one slurmd per machine, named after the host), the finished runs the harness and page
# tests read. Every other test stays with its file's, which may share module state or process names.
SHARED_SESSION_FIXTURES = ("slurm_session", "trained_run", "finished_run")


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if "any_cluster" in used and item.callspec.params.get("any_cluster") == "slurm":
            used.add("slurm_session")   # asked for by name inside the fixture, so not listed
        if SLOW_FIXTURES & used:
            item.add_marker(pytest.mark.slow)
        shared = [name for name in SHARED_SESSION_FIXTURES if name in used]
        # Browser tests start the console's default cluster, whose two workers take the same
        # default TF ports (spec.DEFAULT_PORTS): two such tests at once fight over them (a full
        # run saw Start answer neither "started" nor "Preflight failed" for 300 s). One process
        # runs them one after another.
        if not shared and item.path.parent.name == "e2e":
            shared = ["e2e_default_ports"]
        item.add_marker(pytest.mark.xdist_group(shared[0] if shared else item.path.name))


def pytest_collection_finish(session) -> None:
    """What collection imported (Streamlit, Plotly, pandas, the pages) lives as long as the
    process: freeze it out of the cyclic garbage collector's passes, which otherwise walk it
    again and again and took a fifth of an AppTest test's CPU (perf). 15 % less CPU for
    tests/app/test_cluster_page.py and tests/unit/test_spec.py, 3 runs each (issue 38)."""
    gc.freeze()


# Fixtures that train while they are set up: a test using one takes its turn before its setup.
TRAINING_SETUP_FIXTURES = {"trained_run", "finished_run", "on_finished", "two_ssh_runs"}
_TURN = pytest.StashKey["TrainingTurn"]()


# How many tests may train at once. Measured on 2 cores (2026-11-25, docs/testing.md): two
# paced trainings side by side took 33.0 s where one after the other took 43.5 s; on three
# processes with two slots, `make test` took 663-668 s where one training at a time (two
# processes) took 797-805 s.
TRAINING_SLOTS = 2


class TrainingTurn:
    """A `slow` test's turn at the cores, under pytest-xdist: one of ``TRAINING_SLOTS`` lock files
    in the session's base folder, which every worker shares.

    Light tests run beside every turn, and so do `waits` tests (slow, but waiting on a clock with
    nothing to train). A turn begins when the test body starts (its fixtures, a console or an
    sshd, are set up beside other tests' training), or before setup when a fixture trains
    (``TRAINING_SETUP_FIXTURES``), and lasts through teardown, which stops what the test started.
    Without a bound, three trainings on two cores took 2-3x as long each (the sshd outage test
    97 s instead of 36 s) and the cores sat at 97 % busy, where waits and start-up checks meet
    their bounds.
    """

    def __init__(self, folder: Path | None = None):
        self._folder, self._lock = folder, None
        self.waited = 0.0   # seconds spent waiting for the turn (test-output/timeline.jsonl)

    def begin(self) -> None:
        """Take a free slot, polling until one is (flock cannot wait on the first of several)."""
        if self._folder is None or self._lock is not None:
            return
        began = time.time()
        while (lock := self._free_slot()) is None:
            time.sleep(0.2)
        self._lock, self.waited = lock, time.time() - began

    def _free_slot(self):
        """A slot's lock file, locked, or None while every slot is taken."""
        for slot in range(TRAINING_SLOTS):
            fh = open(self._folder / f"training-{slot}.lock", "w")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fh
            except BlockingIOError:
                fh.close()
        return None

    def end(self) -> None:
        """Give the turn up now. A test that trains and then only waits on a clock (a stall or
        collective timeout) calls this in between: the next training test may start beside it."""
        if self._lock is not None and not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
        self._folder = None


def _turn(item) -> TrainingTurn:
    if _TURN not in item.stash:
        takes_turns = (os.environ.get("PYTEST_XDIST_WORKER") and item.get_closest_marker("slow") is not None
                       and item.get_closest_marker("waits") is None)
        folder = item.config._tmp_path_factory.getbasetemp().parent
        item.stash[_TURN] = TrainingTurn(folder if takes_turns else None)
    return item.stash[_TURN]


def _cpu_ticks() -> tuple[int, int]:
    """The machine's (busy, total) CPU ticks since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]   # idle + iowait
    return sum(fields) - idle, sum(fields)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """One line per test in test-output/timeline.jsonl: which process ran it, from when to when,
    and how busy the whole machine's CPUs were meanwhile; it shows what ran beside a test that
    took far longer in a full run than alone (`python tests/timeline.py` reads it)."""
    began, (busy0, total0) = time.time(), _cpu_ticks()
    try:
        return (yield)
    finally:
        busy1, total1 = _cpu_ticks()
        line = {"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                "start": round(began, 2), "end": round(time.time(), 2),
                "slow": item.get_closest_marker("slow") is not None,
                "waits": item.get_closest_marker("waits") is not None,
                "turn_wait": round(item.stash[_TURN].waited, 2) if _TURN in item.stash else 0.0,
                "cpu_busy": round((busy1 - busy0) / max(1, total1 - total0), 3)}
        TIMELINE.parent.mkdir(parents=True, exist_ok=True)
        with open(TIMELINE, "a") as fh:
            fh.write(json.dumps(line) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if TRAINING_SETUP_FIXTURES & set(getattr(item, "fixturenames", ())):
        _turn(item).begin()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _turn(item).begin()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _turn(item).end()


@pytest.fixture
def training_turn(request) -> TrainingTurn:
    """This test's turn (see ``TrainingTurn``), for a test that ends it early."""
    return _turn(request.node)


# Fault scenarios write their measured figures here (tests/faults/conftest.py ``record``).
FAULT_RESULTS = "fault_results.json"


def pytest_terminal_summary(terminalreporter, config) -> None:
    """Every process's fault figures: under pytest-xdist each worker writes its own file below
    the session's base folder (popen-gwN/), and this summary runs in the controller."""
    base = config._tmp_path_factory.getbasetemp()
    files = sorted(base.glob(FAULT_RESULTS)) + sorted(base.glob(f"*/{FAULT_RESULTS}"))
    results = {name: figures for f in files for name, figures in json.loads(f.read_text()).items()}
    if TIMELINE.exists():
        rows = timeline.load(TIMELINE)
        if rows:   # --durations counts a wait for a training turn as the test's own time
            terminalreporter.section("longest tests, net of waiting for a training turn "
                                     "(python tests/timeline.py)")
            terminalreporter.write_line(timeline.headline(rows))
            for line in timeline.longest(rows, 8):
                terminalreporter.write_line(line)
    if results:
        terminalreporter.section("fault scenarios (measured; also in "
                                 + ", ".join(str(f) for f in files) + ")")
        for name, figures in results.items():
            terminalreporter.write_line(f"{name}: {json.dumps(figures)}")


# How long the processes a session started may take to exit after its last test: a stopped
# run's keeper leaves at its next poll (1 s), a task's supervisor within its stop's grace.
LEFTOVER_GRACE_S = 20.0


def leftovers(base: str) -> list[str]:
    """Live processes whose command line names a path under ``base`` (this session's temporary
    folder: every test's runs, workdirs, sshd and browser profiles are below it)."""
    return [line for line in ps("pid=,stat=,args=")
            if base in line and not line.split(None, 2)[1].startswith("Z") and "ps -ww" not in line]


@pytest.hookimpl(trylast=True)   # after the session fixtures' teardown (sshd, Slurm, consoles)
def pytest_sessionfinish(session) -> None:
    """Nothing is left behind: a process a test started (a keeper, a task, a daemon) that outlives
    the session fails the run, named, and is killed. A CI run left two keepers polling for ever,
    and no test had noticed (tests/faults/test_keeper.py, the restart that cannot start)."""
    if hasattr(session.config, "workerinput"):
        return   # under pytest-xdist the controller looks, once every worker has finished
    base = f"{session.config._tmp_path_factory.getbasetemp()}/"
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := leftovers(base)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        _fail(session, f"processes left behind {LEFTOVER_GRACE_S:.0f} s after the last test (killed)", left)
        for line in left:
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    # Issue 47: the harness ends with os._exit, so TensorFlow's autograph files outlived every
    # run in the host's temp folder (4,000 after one `make test`). A task's TMPDIR is its own now.
    files = sorted(autograph_files())
    if files:
        _fail(session, f"temporary files left behind in {os.environ[TEST_TMPDIR]} (removed)",
              [str(f) for f in files])
        for f in files:
            f.unlink(missing_ok=True)


def _fail(session, title: str, lines: list[str]) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    reporter.ensure_newline()
    reporter.section(title, red=True)
    for line in lines:
        reporter.write_line(line[:300])
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config) -> None:
    if HOME.name.startswith("tfconsole-test-home-"):
        shutil.rmtree(HOME, ignore_errors=True)
    if os.environ.get("TFCONSOLE_TEST_TMP_OWNER") == str(os.getpid()):
        shutil.rmtree(os.environ[TEST_TMPDIR], ignore_errors=True)


def require(what: str, present: bool) -> None:
    """Skip on a developer machine without ``what``; fail in CI, where it must be installed."""
    if present:
        return
    if IN_CI:
        pytest.fail(f"{what} is missing; `make test` installs it")
    pytest.skip(f"{what} is not installed (run `make test` to install it)")


@pytest.fixture(scope="session")
def client_key(tmp_path_factory) -> Path:
    require("ssh-keygen (openssh-client)", bool(shutil.which("ssh-keygen")))
    folder = tmp_path_factory.mktemp("client")
    sshd.keygen(folder / "id_ed25519")
    (folder / "authorized_keys").write_text((folder / "id_ed25519.pub").read_text())
    return folder / "id_ed25519"


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory, client_key):
    """Two real sshd servers, on 127.0.0.2 and 127.0.0.3, each with its own host key."""
    require("sshd (openssh-server)", os.path.exists(sshd.SSHD))
    root = tmp_path_factory.mktemp("sshd")
    hosts = [sshd.make_host(root, f"127.0.0.{n}", client_key.parent / "authorized_keys", home=str(HOME))
             for n in (2, 3)]
    yield hosts
    for host in hosts:
        host.stop()


@pytest.fixture
def ssh_options(tmp_path, ssh_hosts):
    """Options whose known_hosts already trusts both test hosts (as after an operator's trust)."""
    from backend.hosts.ssh import SSHOptions
    known = tmp_path / "known_hosts"
    known.write_text("".join(sshd.known_hosts_line(h) for h in ssh_hosts))
    return SSHOptions(known_hosts=str(known), ssh_config=str(tmp_path / "no_ssh_config"),
                      allow_agent=False, look_for_keys=False)


@pytest.fixture(scope="session")
def python_path() -> str:
    """The interpreter the test hosts use: this venv's, which has TensorFlow."""
    return sys.executable


@pytest.fixture(scope="session")
def user() -> str:
    return getpass.getuser()


def wait_for(predicate, timeout: float, what: str, poll: float = 0.2):
    """Poll until ``predicate()`` is truthy and return it; fail naming ``what`` after ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def ssh_task(host, role, port, client_key, python, workdir, **extra) -> dict:
    """One task on a test sshd host, as a spec dict."""
    return {"role": role, "host": host.address, "ssh_port": host.port, "tf_port": port,
            "identity_file": str(client_key), "python": python, "workdir": str(workdir), **extra}


def ps(fields: str = "args=") -> list[str]:
    """Every process as ``ps -eo FIELDS`` lists it, never cut short: without ``-ww`` ps cuts each
    line at $COLUMNS, which pytest-xdist's workers set to 80, and a check that a run id or path is
    *not* listed would then pass without looking."""
    return subprocess.run(["ps", "-ww", "-eo", fields], capture_output=True, text=True).stdout.splitlines()


def temp_left(run, before: set[Path], wait_s: float = 10.0) -> list[str]:
    """What a run that has ended left in its hosts' temp folders: autograph files new since
    ``before`` (``autograph_files()``) in the session's TMPDIR, where a host's /tmp stands, and its
    tasks' own temp folders (RUN/tmp/<task>: a supervisor removes its task's as it ends, so they
    get ``wait_s``). Empty: nothing left."""
    def left() -> list[str]:
        folders = [Path(HOME, t.remote_run_dir, "tmp", t.name) for t in run.state.tasks]
        return sorted(map(str, (autograph_files() - before) | {f for f in folders if f.exists()}))
    deadline = time.monotonic() + wait_s
    while (found := left()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def ended_well(run, statuses) -> bool:
    """What an operator checks of a run that should have finished: recorded finished, and every
    task exited 0 or, still shutting down ``CHIEF_DONE_GRACE_S`` after the chief finished (a
    loaded machine's TensorFlow teardown), was stopped then (docs/reliability.md)."""
    from backend.records.outcome import AFTER_CHIEF_STOP
    return str(run.state.phase) == "finished" and all(
        s.exit_code == 0 or AFTER_CHIEF_STOP in (s.label or "") for s in statuses)


def processes_of(run, settle_s: float = 10.0) -> list[str]:
    """Every live process of the run, from `ps`: by recorded process group or run id in argv.

    The console's own reads of the run's folder (``hostctl read``: the log copy that follows a
    stop, backend/runs/aftercare.py) end by themselves; a full suite once caught two of them
    still reading a moment after ``stop`` returned. Such reads are waited out for ``settle_s``;
    one still there after that counts, and so does any other process at once."""
    return settled(lambda: _live_processes_of(run), settle_s)


def processes_naming(text: str, settle_s: float = 10.0) -> list[str]:
    """Every live process whose argv names ``text`` (a sweep's id), the console's own reads
    waited out as ``processes_of`` does."""
    return settled(lambda: [line for line in ps() if text in line and "ps -ww" not in line], settle_s)


def settled(left, settle_s: float) -> list[str]:
    """``left()`` once it holds no ``hostctl read`` (they end by themselves) or ``settle_s`` has
    passed: a read still there then counts, and any other process counts at once."""
    deadline = time.time() + settle_s
    while True:
        found = left()
        if not found or not all(" hostctl read " in line for line in found) or time.time() > deadline:
            return found
        time.sleep(0.2)


def _live_processes_of(run) -> list[str]:
    groups = {t.pgid for t in run.state.tasks if t.pgid}
    left = []
    for line in ps("pid=,pgid=,stat=,args="):
        pid, pgid, stat, args = line.split(None, 3)
        if stat.startswith("Z") or "ps -eo" in args:
            continue
        if int(pgid) in groups or run.run_id in args:
            left.append(line)
    return left


@pytest.fixture
def ssh_cluster(ssh_hosts, client_key, python_path, tmp_path):
    """A chief on 127.0.0.2 and a worker on 127.0.0.3, over real sshd."""
    from backend.config.spec import cluster_from_dict
    return cluster_from_dict({"tasks": [
        ssh_task(ssh_hosts[0], "chief", sshd.free_port(), client_key, python_path, tmp_path / "h2"),
        ssh_task(ssh_hosts[1], "worker", sshd.free_port(), client_key, python_path, tmp_path / "h3"),
    ]})


@pytest.fixture
def local_cluster(python_path, tmp_path):
    """Two workers on this machine through the local transport."""
    from backend.config.spec import cluster_from_dict
    return cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
         "python": python_path, "workdir": str(tmp_path / "local")} for _ in range(2)]})


@pytest.fixture(scope="session")
def operator_ssh(ssh_hosts, client_key, user) -> OperatorSSH:
    """The private HOME's ~/.ssh: aliases h2 and h3 for ``ssh_hosts``, trusted, with User and key."""
    home = OperatorSSH(HOME, client_key, user)
    home.add("h2", ssh_hosts[0])
    home.add("h3", ssh_hosts[1])
    return home


def alias_task(alias: str, role: str, python: str, workdir, **extra) -> dict:
    """One task named only by its ssh_config alias, as an operator writes it."""
    return {"role": role, "host": alias, "tf_port": sshd.free_port(), "python": python,
            "workdir": str(workdir), **extra}


def operator_launch_task(host: sshd.SSHHost, role: str, python: str, **extra) -> dict:
    """A task on a test sshd named by address and SSH port, with User, IdentityFile and
    known_hosts from the operator's ~/.ssh (``alias_task`` names it by its alias alone)."""
    return {"role": role, "host": host.address, "ssh_port": host.port, "tf_port": sshd.free_port(),
            "python": python, **extra}


@pytest.fixture
def alias_cluster(operator_ssh, python_path, tmp_path):
    """Chief ``h2``, worker ``h3``: real sshd reached through ~/.ssh/config alone."""
    from backend.config.spec import cluster_from_dict
    return cluster_from_dict({"tasks": [alias_task("h2", "chief", python_path, tmp_path / "h2"),
                                        alias_task("h3", "worker", python_path, tmp_path / "h3")]})


@dataclass
class JumpRoute:
    """``target`` is reachable only through ``jump`` (both aliases in ~/.ssh/config)."""
    jump: str
    target: str
    jump_sshd: sshd.SSHHost
    target_sshd: sshd.SSHHost


@pytest.fixture(scope="session")
def jump_host(operator_ssh, client_key, tmp_path_factory):
    """h4 (127.0.0.4) is a jump host; h5 (127.0.0.5) sits behind it, in a private network."""
    require("network namespaces (root, util-linux, iproute2)", netns.available())
    root = tmp_path_factory.mktemp("jump")
    space = netns.Netns()
    keys = client_key.parent / "authorized_keys"
    outside = ("127.0.0.4", sshd.free_port("127.0.0.4"))
    hidden = sshd.make_host(root, "127.0.0.5", keys, home=str(HOME), netns=space,
                            port=sshd.free_port("127.0.0.5"))  # a port nothing uses out here
    gate = sshd.make_host(root, outside[0], keys, home=str(HOME), netns=space, port=outside[1])
    bridge = space.bridge(outside, outside)
    try:
        sshd.wait_port(*outside)
        operator_ssh.add("h4", gate)
        operator_ssh.add("h5", hidden, ProxyJump="h4")
        yield JumpRoute("h4", "h5", gate, hidden)
    finally:
        operator_ssh.remove("h5")
        operator_ssh.remove("h4")
        for proc in (gate, hidden):
            proc.stop()
        bridge.kill()
        bridge.wait(timeout=10)
        space.close()


def chief_metrics(run) -> list[dict]:
    """The chief's metrics.jsonl (every scenario's chief host is this machine)."""
    path = Path(os.path.expanduser(f"~/{run.state.chief.remote_run_dir}")
                if not os.path.isabs(run.state.chief.remote_run_dir) else run.state.chief.remote_run_dir)
    path = path / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def slurm_fields(folder: Path, python: str, **fields) -> dict:
    """A cluster file's content for the Slurm test clusters: two tasks a node, the console on the
    login host (local), the shared folder in ``folder``; ``fields`` add or replace."""
    return {"kind": "slurm", "host": "localhost", "transport": "local", "partition": "debug",
            "tasks_per_node": 2, "time_limit": "10", "python": python,
            "workdir": str(folder / "shared"), "tf_port": sshd.free_port(span=2), **fields}


def slurm_spec(folder: Path, python: str, **fields):
    from backend.config.slurm_spec import slurm_from_dict
    return slurm_from_dict(slurm_fields(folder, python, **fields))


def slurm_file(folder: Path, python: str, **fields) -> Path:
    """The same as a file, as an operator passes it to ``launch``."""
    import yaml
    path = folder / "slurm-cluster.yaml"
    path.write_text(yaml.safe_dump(slurm_fields(folder, python, **fields)))
    return path


def cli(*args: str, runs: Path, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """``tfconsole --runs RUNS ARGS`` as an operator types it; ``check``: it must succeed."""
    proc = subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(params=["ssh", "slurm"])
def any_cluster(request, tmp_path, python_path):
    """One scenario on each cluster kind (issue 46: one test with a parameter, not an SSH copy and
    a Slurm copy): a chief and a worker on two loopback SSH hosts, or two tasks of one Slurm job.
    Returns the cluster and the keyword arguments its launch takes."""
    from backend.runs import launcher
    if request.param == "ssh":
        return request.getfixturevalue("ssh_cluster"), {
            "options": request.getfixturevalue("ssh_options"), "preflight": launcher.Preflight.SKIP}
    request.getfixturevalue("slurm_cluster")
    return slurm_spec(tmp_path, python_path), {}


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL server on loopback (rig/postgres.py) for the session: an empty database
    an operator would name by URL; the server and its folder are gone after the session."""
    from rig import postgres
    lacking = postgres.missing()
    require("a PostgreSQL server (" + ", ".join(lacking) + ")", not lacking)
    server = postgres.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def slurm_cluster(slurm_session):
    """The session's Slurm cluster; whatever a test left queued or running is cancelled after it,
    so the next test finds the node idle."""
    yield slurm_session
    slurm_session.cancel_all()


@pytest.fixture(scope="session")
def slurm_session():
    """A real one-node Slurm cluster (rig/slurm.py); ``SLURM_CONF`` points every client at it.

    Session-wide: the daemons start in about a second, but one cluster for all tests keeps the
    job ids and the node's state easy to read in a failure.
    """
    from rig import slurm
    lacking = slurm.missing()
    require("a one-node Slurm cluster (" + ", ".join(lacking) + ")", not lacking)
    cluster = slurm.start()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    yield cluster
    cluster.stop()
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before
