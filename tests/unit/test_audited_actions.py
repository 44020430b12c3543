"""Trust-host and dump stacks go through the roles file and the audit like stop and export
(issue 48, item 4): trust-host is for admins only, dump stacks for a run's owner (or an admin);
each try, allowed or refused, is one audit line."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from backend.access import audit, identity, roles
from backend.access.identity import Identity
from backend.hosts import trust
from backend.runs.handle import Run

ALICE, BOB, CAROL = (Identity("alice@example.org", "console", "desk"), Identity("bob", "cli", "laptop"),
                     Identity("carol@example.org", "console", "desk"))
ROLES = "users:\n  alice@example.org: admin\n  bob: operator\n  carol@example.org: viewer\n"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    (tmp_path / roles.FILE).write_text(ROLES)
    return tmp_path


def lines(root) -> list[tuple[str, str, str]]:
    found, bad = audit.read(root)
    assert bad == []
    return [(e["who"].name, e["action"], e["outcome"].split(":")[0]) for e in found]


def test_only_an_admin_trusts_a_host_and_every_try_is_recorded(runs, monkeypatch):
    filed = []
    monkeypatch.setattr(trust, "trust_host_key", lambda host, fp, **kw: filed.append((host, fp, kw["port"])) or "key")
    for who in (BOB, CAROL):
        with identity.acting_as(who), pytest.raises(roles.AccessDenied, match=r"trust_host is for admins"):
            audit.trusted_host(runs, "gpu1", "SHA256:abc", port=2222)
    assert filed == []   # refused before the host was even asked
    with identity.acting_as(ALICE):
        assert audit.trusted_host(runs, "gpu1", "SHA256:abc", port=2222) == "key"
    assert filed == [("gpu1", "SHA256:abc", 2222)]
    assert lines(runs) == [("bob", "trust_host", "refused"), ("carol@example.org", "trust_host", "refused"),
                           ("alice@example.org", "trust_host", "ok")]
    assert audit.read(runs)[0][-1]["args"] == {"host": "gpu1", "port": 2222, "fingerprint": "SHA256:abc"}


def test_a_key_that_changed_is_recorded_as_refused(runs, monkeypatch):
    from backend.errors import HostKeyError

    def changed(host, fp, **kw):
        raise HostKeyError(host, "it offers SHA256:other", "Do not trust it.", fingerprint="SHA256:other", key_type="ssh-ed25519")
    monkeypatch.setattr(trust, "trust_host_key", changed)
    with identity.acting_as(ALICE), pytest.raises(HostKeyError):
        audit.trusted_host(runs, "gpu1", "SHA256:abc")
    assert lines(runs) == [("alice@example.org", "trust_host", "refused")]


def test_dump_stacks_is_for_the_runs_owner_or_an_admin(runs, monkeypatch):
    from backend.diagnosis import stacks
    monkeypatch.setattr(stacks, "dump_and_save", lambda run, **kw: ([], None))
    run = SimpleNamespace(local_dir=str(runs / "r1"), run_id="r1", state=SimpleNamespace(owner={"name": "bob"}))
    for who in (BOB, ALICE):
        with identity.acting_as(who):
            assert Run.dump_stacks(run) == ([], None)
    with identity.acting_as(CAROL), pytest.raises(roles.AccessDenied, match="viewer: dump_stacks"):
        Run.dump_stacks(run)
    (runs / roles.FILE).write_text(ROLES + "  dave: operator\n")
    with identity.acting_as(Identity("dave", "cli", "x")), pytest.raises(roles.AccessDenied, match="bob started"):
        Run.dump_stacks(run)
    assert lines(runs) == [("bob", "dump_stacks", "ok"), ("alice@example.org", "dump_stacks", "ok"),
                           ("carol@example.org", "dump_stacks", "refused"), ("dave", "dump_stacks", "refused")]
    assert "dump_stacks" in audit.ACTIONS and "trust_host" in audit.ACTIONS   # `tfconsole audit --action`


def test_a_runs_alert_settings_are_in_its_launch_line_with_the_url_masked(tmp_path, monkeypatch):
    """Alert settings are set by the launch (the job's alerts:), so its line carries them."""
    import sys
    from backend.config.spec import default_cluster, job_from_dict
    from backend.runs.launcher import Preflight, launch
    from backend.runs.store import RunStore
    from rig.sshd import free_port
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    monkeypatch.delenv("TFCONSOLE_WEBHOOK", raising=False)
    cluster = default_cluster(sys.executable)
    for task in cluster.tasks:
        object.__setattr__(task, "tf_port", free_port())
    job = job_from_dict({"kind": "command", "command": [sys.executable, "-c", "pass"],
                         "alerts": {"webhook": "https://hooks.example.org/T0/secret-path", "format": "json"}})
    with identity.acting_as(BOB):
        run = launch(cluster, job, store=RunStore(tmp_path), preflight=Preflight.SKIP)
    run.stop(grace_s=3)   # nothing left running (the command exits at once anyway)
    line = audit.read(tmp_path)[0][0]
    assert (line["action"], line["outcome"]) == ("launch", "ok")
    assert line["args"]["alerts"] == {"webhook": "https://hooks.example.org/***", "format": "json"}
    assert "secret-path" not in (tmp_path / audit.FILE).read_text()


def test_a_profile_is_for_the_runs_owner_or_an_admin_and_refused_before_any_host_is_asked(runs, monkeypatch):
    from backend import profiles
    from backend.hosts import remote
    asked = []
    monkeypatch.setattr(remote, "request_profile", lambda host, steps: asked.append(steps) or "profile-1.json")
    state = SimpleNamespace(owner={"name": "bob"}, live=False, phase="finished")
    run = SimpleNamespace(local_dir=str(runs / "r1"), run_id="r1", state=state)
    with identity.acting_as(CAROL), pytest.raises(roles.AccessDenied, match="viewer: profile"):
        profiles.profile(run, 5)
    with identity.acting_as(BOB), pytest.raises(profiles.RunError, match="not training"):
        profiles.profile(run, 5)   # allowed, but the run has ended: said, nothing asked
    assert asked == []
    assert lines(runs) == [("carol@example.org", "profile", "refused"), ("bob", "profile", "refused")]
