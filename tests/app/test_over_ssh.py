"""Console pages over real sshd, as an operator uses them: ~/.ssh/config aliases, preflight,
trusting a host key, YAML import, Start and Stop, Restore, reattaching to a run started elsewhere."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from backend.runs.store import RunStore
from rig import sshd
from tests.app.conftest import errors, open_page
from tests.conftest import HOME, ended_well, processes_of, wait_for


def test_preflight_from_the_page_over_aliases(page, alias_rows):
    at = page("cluster", cluster_rows=alias_rows)
    assert not at.exception and not errors(at), errors(at)
    at.button(key="preflight_button").click().run()
    assert not at.exception
    assert not errors(at), errors(at)
    table = at.dataframe[-1].value   # the preflight table, below the cluster editor
    assert list(table["host"]) == ["h2", "h3"]
    assert all(str(v).startswith("ok") for v in table["ssh"]), table.to_dict()
    assert any("Every host passed" in s.value for s in at.success)


def test_preflight_failure_names_the_task_and_host(page, alias_rows):
    alias_rows[1]["python"] = "/no/such/python"
    at = page("cluster", cluster_rows=alias_rows)
    at.button(key="preflight_button").click().run()
    assert not at.exception
    failures = [m for m in errors(at) if m.startswith("worker-0 (h3)")]
    assert failures and "/no/such/python" in failures[0], errors(at)
    assert not any(m.startswith("chief") for m in errors(at))


@pytest.fixture
def untrusted(tmp_path, client_key, operator_ssh):
    """A fresh sshd on 127.0.0.6 whose key nobody has trusted yet."""
    host = sshd.make_host(tmp_path, "127.0.0.6", client_key.parent / "authorized_keys", home=str(HOME))
    yield host
    host.stop()


def test_trust_a_host_key_from_the_page(page, untrusted, python_path):
    from tests.app.conftest import table_rows
    rows = table_rows([{"role": "worker", "host": untrusted.address, "ssh_port": untrusted.port,
                        "tf_port": sshd.free_port(), "python": python_path}])
    at = page("cluster", cluster_rows=rows)
    at.button(key="preflight_button").click().run()
    assert any("unknown host key" in m for m in errors(at)), errors(at)   # refused, not accepted

    target = f"{untrusted.address}:{untrusted.port}"
    assert at.selectbox(key="hostkey_target").value == target
    at.button(key="hostkey_fetch").click().run()
    # What the operator compares it with: ssh-keygen on the host's own public key.
    expected = subprocess.run(["ssh-keygen", "-lf", str(untrusted.folder / "host_ed25519.pub")],
                              capture_output=True, text=True, check=True).stdout.split()[1]
    assert any(expected in c.value for c in at.code), [c.value for c in at.code]
    at.button(key="hostkey_trust").click().run()
    assert not at.exception
    assert any("Trusted" in s.value and expected in s.value for s in at.success)
    assert f"[{untrusted.address}]:{untrusted.port}" in (HOME / ".ssh" / "known_hosts").read_text()

    at.button(key="preflight_button").click().run()
    assert not errors(at), errors(at)
    assert any("Every host passed" in s.value for s in at.success)


def test_yaml_import_on_the_page(page, alias_rows, tmp_path):
    from backend.config.spec import cluster_to_dict
    from console.forms import check_rows
    cluster, _ = check_rows(alias_rows)
    text = yaml.safe_dump(cluster_to_dict(cluster)).encode()
    at = page("cluster")
    at.file_uploader(key="yaml_upload").set_value(("cluster.yaml", text, "application/x-yaml")).run()
    at.button(key="yaml_load").click().run()
    assert not at.exception and not errors(at), errors(at)
    assert any("Imported" in s.value for s in at.success)
    assert [(r["role"], r["host"]) for r in at.session_state["cluster_rows"]] == [("chief", "h2"), ("worker", "h3")]
    assert any("2 task(s)" in s.value and "h2" in s.value for s in at.success)

    at.file_uploader(key="yaml_upload").set_value(("bad.yaml", b"tasks: [{role: chief, host: 'a b'}]",
                                                   "application/x-yaml")).run()
    at.button(key="yaml_load").click().run()
    assert not at.exception
    assert any("host" in m for m in errors(at)), errors(at)
    assert [r["host"] for r in at.session_state["cluster_rows"]] == ["h2", "h3"]   # table kept


def test_import_hosts_from_the_operators_ssh_config(page, operator_ssh):
    at = page("cluster")
    assert at.text_input(key="ssh_config_path").value == "~/.ssh/config"   # the operator's own file
    at.button(key="ssh_config_read").click().run()
    assert not at.exception and not errors(at), errors(at)
    assert {"h2", "h3"} <= set(at.session_state["ssh_aliases"])
    assert "*" not in at.session_state["ssh_aliases"]            # patterns are not hosts
    at.multiselect(key="ssh_aliases_pick").set_value(["h2", "h3"]).run()
    at.number_input(key="ssh_aliases_port").set_value(23500)
    at.button(key="ssh_aliases_add").click().run()
    assert not at.exception and not errors(at), errors(at)
    assert [(r["role"], r["host"], r["tf_port"]) for r in at.session_state["cluster_rows"]] == [
        ("chief", "h2", 23500), ("worker", "h3", 23500)]


def _table(at, *columns: str):
    """The first table on the page that has these columns (AppTest does not keep their keys)."""
    return next(d.value for d in at.dataframe if set(columns) <= set(d.value.columns))


def _task_states(at) -> dict[str, tuple[str, str]]:
    return {row["task"]: (row["host"], row["state"]) for row in _table(at, "task", "host", "state")
            .to_dict("records")}


@pytest.mark.slow
def test_start_and_stop_over_ssh_aliases(page, operator_ssh, python_path, runs_dir):
    """Start on a cluster named only by ~/.ssh/config aliases, default workdir; a new session
    (another tab, a reopened console) shows the live run on its hosts and stops it."""
    from backend.runs.launcher import attach
    from tests.app.conftest import table_rows
    rows = table_rows([{"role": role, "host": alias, "tf_port": sshd.free_port(), "python": python_path}
                       for role, alias in (("chief", "h2"), ("worker", "h3"))])
    at = page("launch", cluster_rows=rows)
    at.number_input(key="param_epochs").set_value(1)
    at.number_input(key="param_steps_per_epoch").set_value(5000)   # still running when we stop
    at.button(key="start_button").click().run()
    assert not at.exception and not errors(at), errors(at)
    run_id = at.session_state["run_id"]
    wait_for(lambda: at.run() and any("started" in s.value for s in at.success) and at, 180,
             "the background start to report success")
    assert not errors(at), errors(at)
    store = RunStore(runs_dir)
    assert store.load(run_id).live
    tasks = store.load(run_id).tasks
    assert [t.host for t in tasks] == ["h2", "h3"]
    # The default workdir, "tfconsole", is relative to the remote home (here the session's HOME).
    assert all(t.remote_run_dir.startswith("tfconsole/") for t in tasks), [t.remote_run_dir for t in tasks]
    assert all((HOME / t.remote_run_dir).is_dir() for t in tasks)
    states = wait_for(lambda: (s := _task_states(at.run())) and
                      all(state == "running" for _, state in s.values()) and s, 120, "both tasks running")
    assert sorted(host for host, _ in states.values()) == ["h2", "h3"]

    at = page("launch")   # a new session: nothing in it but the login token
    assert not at.exception and not errors(at), errors(at)
    assert at.session_state["run_id"] == run_id
    assert [(r["role"], r["host"]) for r in at.session_state["cluster_rows"]] == [("chief", "h2"), ("worker", "h3")]
    assert any("chief-0 on h2:" in c.value and "worker-0 on h3:" in c.value for c in at.caption), \
        [c.value for c in at.caption]
    # ... and the live run's job, not the built-in default's.
    assert (at.number_input(key="param_epochs").value, at.number_input(key="param_steps_per_epoch").value) == (1, 5000)
    at.button(key="launch_stop").click().run()
    at.button(key="launch_yes").click().run()
    assert not at.exception and not errors(at), errors(at)
    wait_for(lambda: at.run() and any("no process is left" in s.value for s in at.success) and at, 60,
             "the background stop to report success")
    assert store.load(run_id).phase == "stopped"
    run = attach(run_id, store=store)
    groups = {t.pgid for t in run.state.tasks}
    # The workers are gone when Stop says so; the keeper and the console's watch agent (which
    # brings the last lines first) end within seconds.
    assert not [p for p in processes_of(run) if int(p.split()[1]) in groups], processes_of(run)
    wait_for(lambda: processes_of(run) == [], 60, "no process of the run, keeper and watch agent included")


@pytest.fixture(scope="module")
def two_ssh_runs(tmp_path_factory, operator_ssh, ssh_hosts, python_path):
    """Two short finished runs over sshd (different seeds), launched as the CLI would:
    (runs root, [run ids])."""
    from backend.runs.launcher import Preflight, launch
    from backend.config.spec import cluster_from_dict, job_from_dict
    from tests.conftest import ROOT, operator_launch_task
    root = tmp_path_factory.mktemp("ssh_runs") / "runs"
    ids = []
    for seed in (1, 2):
        cluster = cluster_from_dict({"tasks": [operator_launch_task(ssh_hosts[0], "chief", python_path),
                                               operator_launch_task(ssh_hosts[1], "worker", python_path)]})
        job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                             "params": {"epochs": 1, "steps_per_epoch": 40, "checkpoint_every": 20,
                                        "log_every": 5, "seed": seed}})
        run = launch(cluster, job, store=RunStore(root), preflight=Preflight.SKIP)
        statuses = run.wait(timeout=240)
        assert ended_well(run, statuses), [run.log_tail(s.name, 2000) for s in statuses]
        ids.append(run.run_id)
    yield root, ids
    from console.ui import state
    state._registry(str(root.resolve())).close()


@pytest.fixture
def on_ssh_runs(two_ssh_runs, monkeypatch):
    """Pages see the two runs' folder: (page opener, runs root, run ids)."""
    root, ids = two_ssh_runs
    monkeypatch.setenv("TFCONSOLE_RUNS", str(root))
    return open_page, root, ids


@pytest.mark.slow
def test_compare_two_runs_on_the_runs_page(on_ssh_runs):
    import json

    from console import runs_view
    open_page, root, ids = on_ssh_runs
    for run_id in ids:   # the console copies a run's history when it is opened on the Monitor page
        open_page("monitor", run_id=run_id)
        wait_for(lambda: len(runs_view.load_metrics(root / run_id).global_loss()[0]) >= 8, 60,
                 f"{run_id}'s metrics in the console's copy")
    at = open_page("runs")
    at.selectbox(key="compare_a").set_value(ids[0])
    at.selectbox(key="compare_b").set_value(ids[1])
    at.slider(key="compare_smoothing").set_value(0.0).run()   # the raw curves, to compare exactly
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    traces = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
    assert [t["name"] for t in traces] == ids
    for trace, run_id in zip(traces, ids):
        steps, losses = runs_view.load_metrics(root / run_id).global_loss()
        assert list(_values(trace["x"])) == list(steps)
        assert list(_values(trace["y"])) == pytest.approx(list(losses))
    assert list(_values(traces[0]["y"])) != list(_values(traces[1]["y"]))   # not one run drawn twice


def _values(array):
    """A plotly JSON array: a list, or numpy data packed as {"dtype": ..., "bdata": base64}."""
    import base64

    import numpy as np
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array)


@pytest.mark.slow
def test_yes_restore_relaunches_from_the_chosen_step(on_ssh_runs):
    open_page, root, ids = on_ssh_runs
    store = RunStore(root)
    run_id = ids[1]
    at = open_page("checkpoints", run_id=run_id)
    assert not at.exception and not errors(at), errors(at)
    assert list(_table(at, "step", "size (KB)")["step"]) == [20, 40]
    at.selectbox(key="restore_step").set_value(20)
    at.button(key="restore_button").click().run()
    at.button(key="restore_yes").click().run()
    assert not at.exception and not errors(at), errors(at)
    from backend.runs.launcher import attach
    wait_for(lambda: store.load(run_id).attempt == 2, 120, "the restored attempt to begin")
    run = attach(run_id, store=store)
    assert run.state.attempts[-1].resume_step == 20, run.state
    statuses = run.wait(timeout=240)   # as any reader does, this settles the run when it ends
    assert run.reload().phase == "finished", [run.log_tail(s.name, 2000) for s in statuses]
    # No page is drawn from here on: the console itself rests the run's watch agent.
    wait_for(lambda: processes_of(run) == [], 60, "no process of the run, the console's watch agent included")


def test_tf_config_preview_shows_alias_to_address(page, alias_rows, ssh_hosts):
    at = page("cluster", cluster_rows=alias_rows)
    assert not at.exception and not errors(at), errors(at)
    table = next(d.value for d in at.dataframe if list(d.value.columns) == ["task", "host", "address"])
    ports = [row["tf_port"] for row in alias_rows]
    assert list(table["host"]) == [f"h2:{ports[0]}", f"h3:{ports[1]}"]
    assert list(table["address"]) == [f"{ssh_hosts[0].address}:{ports[0]}", f"{ssh_hosts[1].address}:{ports[1]}"]
    # Every worker's TF_CONFIG carries the addresses, never the aliases only this machine knows.
    import json
    cfg = json.loads(at.json[1].value)
    assert cfg["cluster"]["worker"] == [f"{ssh_hosts[1].address}:{ports[1]}"]
    assert at.selectbox(key="hostkey_target").options == ["h2", "h3"]   # trusted by alias


def test_an_alias_and_its_address_on_one_port_are_one_clash(page, alias_rows, ssh_hosts):
    """The Cluster table checks hosts as the workers dial them: h2 is 127.0.0.2 (~/.ssh/config),
    so a second row naming 127.0.0.2 with h2's tf_port is the clash that launch would refuse."""
    rows = [dict(alias_rows[0]), dict(alias_rows[1], host=ssh_hosts[0].address, tf_port=alias_rows[0]["tf_port"])]
    at = page("cluster", cluster_rows=rows)
    assert not at.exception
    cells = list(at.data_editor[0].value["problem"])
    assert cells[0] == "" and "chief-0 and worker-0 both use" in cells[1], cells
    assert any(m.startswith("Row 2:") for m in errors(at)), errors(at)


def test_a_changed_key_is_replaced_only_by_the_replace_button(page, untrusted, ssh_hosts, python_path):
    from tests.app.conftest import table_rows
    known = HOME / ".ssh" / "known_hosts"
    other = ssh_hosts[1].host_key_pub.split()[:2]   # another host's key, filed under this host's name
    wrong = f"[{untrusted.address}]:{untrusted.port} {other[0]} {other[1]}\n"
    known.write_text(known.read_text() + wrong)
    rows = table_rows([{"role": "worker", "host": untrusted.address, "ssh_port": untrusted.port,
                        "tf_port": sshd.free_port(), "python": python_path}])
    at = page("cluster", cluster_rows=rows)
    at.button(key="hostkey_fetch").click().run()
    assert any("CHANGED" in e for e in errors(at)), errors(at)
    assert at.button(key="hostkey_trust").label == "Replace the old key with this one"
    assert wrong in known.read_text()                  # nothing replaced by just looking
    at.button(key="hostkey_trust").click().run()
    assert not at.exception and any("Trusted" in s.value for s in at.success)
    assert wrong not in known.read_text()
    at.button(key="preflight_button").click().run()
    assert not any("CHANGED" in e for e in errors(at)), errors(at)
