"""A silent network cut between the console and a real sshd (tests/netcut.py stops forwarding and
closes nothing): every SSH operation fails with HostError within its stated bound, and works again
once the link is back. Bounds: SSHOptions.answer_timeout_s for a new command, the command's own
timeout for one in flight, the stream's idle timeout for a read, connect_timeout for a connect."""
from __future__ import annotations

import threading
import time

import pytest

from backend.errors import HostError
from backend.hosts.ssh import SSHOptions, SSHTransport
from tests.conftest import wait_for
from tests.faults.conftest import record
from rig import sshd
from tests.netcut import CutProxy

SLACK_S = 30.0   # a loaded 2-core machine; the bound itself is what record() keeps


@pytest.fixture
def proxy(ssh_hosts):
    p = CutProxy((ssh_hosts[0].address, ssh_hosts[0].port))
    yield p
    p.close()


@pytest.fixture
def options(ssh_hosts, ssh_options, proxy, tmp_path):
    """Default timeouts; the proxy's address trusted with the first host's key."""
    key_type, key = ssh_hosts[0].host_key_pub.split()[:2]
    known = tmp_path / "known_hosts_proxy"
    known.write_text(f"[{proxy.address}]:{proxy.port} {key_type} {key}\n")
    return SSHOptions(known_hosts=str(known), ssh_config=ssh_options.ssh_config,
                      allow_agent=False, look_for_keys=False)


def through(proxy, client_key, options) -> SSHTransport:
    return SSHTransport(proxy.address, port=proxy.port, identity_file=str(client_key), options=options)


def bounded(fn, limit: float) -> tuple[dict, float]:
    """Run ``fn`` in a thread that must end within ``limit`` s: {"value"} or {"error"}, and the time."""
    box: dict = {}

    def call():
        began = time.monotonic()
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - the test inspects whatever came out
            box["error"] = err
        box["elapsed"] = time.monotonic() - began
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"still blocked after {limit:.0f} s: the cut was not detected"
    return box, box["elapsed"]


def fails_within(fn, limit: float) -> tuple[BaseException, float]:
    """``fn`` must raise within ``limit`` s. Returns the error and the time it took."""
    box, took = bounded(fn, limit)
    assert "error" in box, "the call succeeded through a cut link"
    return box["error"], took


def test_new_command_on_a_cut_link(proxy, client_key, options):
    t = through(proxy, client_key, options)
    assert t.run(["echo", "up"]).stdout == "up\n"
    proxy.cut()
    err, took = fails_within(lambda: t.run(["true"], timeout=60), options.answer_timeout_s + SLACK_S)
    assert isinstance(err, HostError) and err.host == proxy.address, repr(err)
    assert "no answer within" in str(err) and str(err).rstrip().endswith("again.")
    proxy.heal()
    assert t.run(["echo", "back"]).stdout == "back\n"   # a fresh connection, no restart needed
    t.close()
    record("network cut: new command", bound_s=options.answer_timeout_s, failed_after_s=took)


def test_command_in_flight_when_the_link_is_cut(proxy, client_key, options):
    t = through(proxy, client_key, options)
    t.run(["true"])

    def slow():
        t.run(["sh", "-c", "sleep 1; echo late"], timeout=8)
    threading.Timer(0.3, proxy.cut).start()
    err, took = fails_within(slow, 8 + SLACK_S)
    assert isinstance(err, HostError) and "timed out after 8" in str(err), repr(err)
    t.close()
    record("network cut: command in flight", bound_s=8.0, failed_after_s=took)


def test_stream_with_no_data(proxy, client_key, options):
    t = through(proxy, client_key, options)
    stream = t.stream(["sh", "-c", "while :; do echo tick; sleep 0.2; done"], idle_timeout=3)
    lines = iter(stream.stdout)
    assert [next(lines) for _ in range(3)] == [b"tick\n"] * 3
    proxy.cut()
    cut_at = time.time()

    def drain():
        for _ in lines:
            pass
    err, took = fails_within(drain, 3 + SLACK_S)
    assert isinstance(err, HostError) and "no data" in str(err), repr(err)
    # What a console shows as "no data since HH:MM:SS": the last line came before the cut.
    assert stream.stdout.last_data is not None and stream.stdout.last_data <= cut_at + 1
    stream.close()
    t.close()
    record("network cut: watch stream", bound_s=3.0, failed_after_s=took)


def test_connect_through_a_cut_link(proxy, client_key, options):
    proxy.cut()
    err, took = fails_within(lambda: through(proxy, client_key, options).run(["true"]),
                             options.connect_timeout + SLACK_S)
    assert isinstance(err, HostError) and "cannot connect" in str(err), repr(err)
    record("network cut: connect", bound_s=options.connect_timeout, failed_after_s=took)


def test_monitor_notices_a_cut_and_says_since_when(proxy, client_key, options, tmp_path, python_path):
    """The watch agent sends a heartbeat every 2 s; a cut link is noticed after STREAM_IDLE_S of
    nothing, the monitor says so and reconnects, and ``last_data`` says since when."""
    from backend.watch.metrics import MetricsStore
    from backend.watch.monitor import STREAM_IDLE_S, RunMonitor
    from rig.watch_run import make_run
    run = make_run(tmp_path / "remote-run")
    mon = RunMonitor(lambda: through(proxy, client_key, options), str(run), str(tmp_path / "local"),
                     MetricsStore(), python=python_path, backoff=(0.5, 2.0)).start()
    try:
        wait_for(lambda: mon.status()["last_heartbeat"], 60, "the agent's first heartbeat")
        proxy.cut()
        cut_at, began = time.time(), time.monotonic()
        wait_for(lambda: "no data" in mon.status()["last_error"], STREAM_IDLE_S + SLACK_S,
                 "the monitor to notice the cut")
        took = time.monotonic() - began
        assert mon.status()["last_data"] <= cut_at + 1   # "no data since" a time before the cut
        proxy.heal()
        wait_for(lambda: mon.status()["last_data"] > cut_at + took, 60, "data again once the link is back")
    finally:
        mon.stop()
    record("network cut: console monitor", bound_s=STREAM_IDLE_S, noticed_after_s=took)


def test_run_status_and_stop_over_a_cut_link(proxy, client_key, options, python_path, tmp_path, store):
    """A live run whose only host sits behind the cut: `status` answers `unreachable` within
    answer_timeout_s (no hang, no traceback), and once the link is back, stop ends it cleanly."""
    from backend.runs import launcher
    from backend.records.outcome import TaskPhase
    from backend.config.spec import cluster_from_dict, job_from_dict
    from tests.conftest import processes_of
    cluster = cluster_from_dict({"tasks": [{
        "role": "worker", "host": proxy.address, "ssh_port": proxy.port, "identity_file": str(client_key),
        "tf_port": sshd.free_port(), "python": python_path, "workdir": str(tmp_path / "w")}]})
    job = job_from_dict({"kind": "command", "command": [python_path, "-c", "import time; time.sleep(300)"]})
    run = launcher.launch(cluster, job, store=store, options=options, preflight=launcher.Preflight.SKIP)
    try:
        assert [s.state for s in run.status()] == [TaskPhase.RUNNING]
        proxy.cut()
        box, took = bounded(run.status, options.answer_timeout_s + SLACK_S)
        assert "value" in box, box   # status answers; it never raises for a host that does not answer
        assert box["value"][0].state == TaskPhase.UNREACHABLE and "no answer within" in box["value"][0].diagnosis
    finally:
        proxy.heal()
        run.stop(grace_s=3)
    assert store.load(run.run_id).phase == "stopped"
    wait_for(lambda: processes_of(run) == [], 30, "no process of the run")
    record("network cut: run status", bound_s=options.answer_timeout_s, answered_after_s=took)
