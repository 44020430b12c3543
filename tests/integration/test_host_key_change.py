"""A host whose SSH key changes under a live run (issue 56 item 6), against a real sshd: known_hosts
still trusts another key for it, as after a reinstall (or an attack). The keeper makes no login,
says "host key CHANGED" with both fingerprints and the fix, holds the run, and never counts the
host silent or gone; nothing trains here, so it needs no training turn."""
from __future__ import annotations

import time

import pytest

from backend.config.spec import JobKind, JobSpec, cluster_from_dict, cluster_to_dict, job_to_dict
from backend.errors import HostKeyChanged
from backend.hosts.known_hosts import blob_fingerprint
from backend.hosts.pool import Pool
from backend.hosts.ssh import SSHTransport
from backend.records.decision import Clocks, Kind, Seen, decide
from backend.records.outcome import TaskPhase, conclude
from backend.records.state import Attempt, Phase, RunState, TaskState
from backend.runs.handle import Run
from backend.runs.keeper import Keeper
from backend.runs.store import RunStore
from rig import sshd
from tests.conftest import ssh_task


def offered_fingerprint(host: sshd.SSHHost) -> str:
    import base64
    return blob_fingerprint(base64.b64decode(host.host_key_pub.split()[1]))


@pytest.fixture
def changed(ssh_options, ssh_hosts, tmp_path):
    """known_hosts trusts a key 127.0.0.3 no longer has: (the host, the old fingerprint)."""
    host = ssh_hosts[1]
    sshd.keygen(tmp_path / "old_host_key")
    old = (tmp_path / "old_host_key.pub").read_text().split()[:2]
    lines = [line for line in open(ssh_options.known_hosts) if not line.startswith(f"[{host.address}]:")]
    with open(ssh_options.known_hosts, "w") as fh:
        fh.write("".join(lines) + f"[{host.address}]:{host.port} {old[0]} {old[1]}\n")
    import base64
    return host, blob_fingerprint(base64.b64decode(old[1]))


def test_a_changed_host_key_is_its_own_error_with_both_fingerprints_and_the_fix(changed, ssh_options):
    host, old = changed
    with pytest.raises(HostKeyChanged) as err:
        SSHTransport(host.address, port=host.port, options=ssh_options).run(["true"], timeout=10)
    new = offered_fingerprint(host)
    assert (err.value.known, err.value.fingerprint) == ((old,), new)
    assert err.value.trust == f"tfconsole trust-host {host.address} --port {host.port} --fingerprint {new} --replace"
    assert "host key CHANGED" in str(err.value) and str(err.value).endswith(err.value.trust)


def a_run(tmp_path, host, client_key, python_path, options) -> Run:
    store = RunStore(tmp_path / "runs")
    cluster = cluster_from_dict({"tasks": [ssh_task(host, "worker", sshd.free_port(), client_key, python_path,
                                                    tmp_path / "h3")]})
    job = JobSpec(kind=JobKind.COMMAND, command=("python", "fit.py"),
                  restart={"mode": "on_failure", "unreachable_grace_s": 0.1, "host_gone_s": 0.1})
    now = time.time()
    state = RunState("r1", now, cluster_to_dict(cluster), job_to_dict(job),
                     [TaskState("worker-0", 0, host.address, str(tmp_path / "h3" / "r1"))],
                     [Attempt(1, now)], Phase.RUNNING)
    store.reserve("r1")
    store.save(state)
    return Run(store.load("r1"), store, Pool(options))


def test_the_keeper_holds_a_run_whose_host_key_changed_and_never_counts_the_host_gone(
        changed, ssh_options, client_key, python_path, tmp_path):
    host, old = changed
    run = a_run(tmp_path, host, client_key, python_path, ssh_options)
    statuses = run.status()
    assert [(s.state, s.key_change.known, s.key_change.offered) for s in statuses] == [
        (TaskPhase.UNREACHABLE, (old,), offered_fingerprint(host))]
    # An hour later, far past unreachable_grace_s and host_gone_s, the decision is still to hold.
    held = decide(Seen(conclude(statuses), tuple(statuses)), Clocks(3600.0, 0.0), run.job.restart)
    assert held.kind == Kind.WAIT, held
    assert held.reason.startswith(f"host key CHANGED for {host.address} (worker-0): known {old}, "
                                  f"now {offered_fingerprint(host)}; check with the host's admin, then "
                                  f"tfconsole trust-host {host.address} --port {host.port}")
    said = []
    keeper = Keeper("r1", store=run.store, options=ssh_options, poll_s=0.05, log=said.append)
    try:
        for _ in range(3):
            assert keeper.check() is None
            time.sleep(0.2)   # past host_gone_s: a host taken for silent would be gone by now
        assert keeper.silent == {} and keeper._gone(run) == {}
    finally:
        keeper.pool.close()
    after = run.store.load("r1")
    assert (after.phase, len(after.attempts), after.attempts[-1].ended) == ("running", 1, None)
    assert [line for line in said if "host key CHANGED" in line and "holding the run" in line], said
