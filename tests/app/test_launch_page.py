"""Launch page: a missing job file is refused; Start launches two local workers; Stop asks first."""
from __future__ import annotations

import pytest

from backend.runs.store import RunStore
from tests.app.conftest import as_owner, errors, local_rows
from tests.conftest import wait_for


def test_missing_job_file_is_an_error(page, runs_dir):
    at = page("launch")
    assert not at.exception
    assert any("No run yet" in i.value for i in at.info)
    at.radio(key="job_source").set_value("Module path").run()
    at.text_input(key="job_module").input("examples/no_such_job.py")
    at.button(key="start_button").click().run()
    assert not at.exception
    assert any("no file at" in m and "no_such_job.py" in m for m in errors(at)), errors(at)
    assert RunStore(runs_dir).list() == []


@pytest.mark.slow
def test_start_then_stop_with_confirmation(page, runs_dir):
    at = page("launch", cluster_rows=local_rows())
    at.number_input(key="param_epochs").set_value(1)
    at.number_input(key="param_steps_per_epoch").set_value(2000)   # still running when we stop
    at.button(key="start_button").click().run()
    assert not at.exception
    assert not errors(at), errors(at)
    run_id = at.session_state["run_id"]                         # chosen before any slow work
    assert at.button(key="start_button").disabled              # while it starts, and after
    wait_for(lambda: at.run() and any("started" in s.value for s in at.success) and at, 180,
             "the background start to report success")
    assert not errors(at), errors(at)
    assert RunStore(runs_dir).load(run_id).live
    assert at.button(key="start_button").disabled              # one live run at a time

    at.button(key="launch_stop").click().run()
    assert any("Stop run" in w.value for w in at.warning)       # asks first
    assert RunStore(runs_dir).load(run_id).live
    at.button(key="launch_yes").click().run()
    assert not at.exception
    wait_for(lambda: at.run() and any("no process is left" in s.value for s in at.success) and at, 60,
             "the background stop to report success")
    assert RunStore(runs_dir).load(run_id).phase == "stopped"
    assert not at.button(key="start_button").disabled


def test_form_values_survive_a_page_switch(runs_dir):
    """Streamlit drops the state of widgets not shown; the launch form keeps its values anyway."""
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT
    at = as_owner(AppTest.from_file(str(ROOT / "console" / "app.py"), default_timeout=60)).run()
    assert at.number_input(key="param_epochs").value == 3
    at.number_input(key="param_epochs").set_value(7)
    at.number_input(key="param_log_every").set_value(4)
    at.selectbox(key="restart_mode").set_value("on_failure").run()
    at.number_input(key="max_restarts").set_value(5)
    at.radio(key="job_source").set_value("Module path").run()
    at.text_input(key="job_module").input("examples/synthetic.py").run()

    # Widget state is dropped at the end of a run that does not draw the widget (a run cut short
    # by st.stop() keeps it), so go to a page that runs to its end.
    at.switch_page("../pages/cluster.py").run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Cluster"]
    assert "param_epochs" not in at.session_state and "job_module" not in at.session_state  # dropped
    at.switch_page("../pages/launch.py").run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Launch"]
    assert at.radio(key="job_source").value == "Module path"
    assert at.text_input(key="job_module").value == "examples/synthetic.py"
    assert at.number_input(key="param_epochs").value == 7
    assert at.number_input(key="param_log_every").value == 4
    assert at.selectbox(key="restart_mode").value == "on_failure"
    assert at.number_input(key="max_restarts").value == 5


def test_unbalanced_quote_in_command_is_a_field_error(page, runs_dir):
    """shlex.split raised ValueError out of the page: Streamlit's traceback instead of a message."""
    at = page("launch")
    at.radio(key="job_source").set_value("Command").run()
    at.text_input(key="job_command").input("python train.py --name 'unclosed")
    at.button(key="start_button").click().run()
    assert not at.exception
    assert any(m.startswith("Command:") and "quote" in m for m in errors(at)), errors(at)
    assert RunStore(runs_dir).list() == []


def test_stall_timeout_is_a_launch_field_that_reaches_the_job(page, runs_dir):
    """Issue 26 item 3: the stall timeout is set on the form, next to the restart policy, and the
    started run's job carries it (as a job file's ``restart.stall_timeout_s`` would)."""
    import sys
    at = page("launch", cluster_rows=local_rows())
    field = at.number_input(key="stall_timeout_s")
    assert field.value == 300.0 and field.disabled          # the default; no keeper under `never`
    at.radio(key="job_source").set_value("Command").run()
    at.text_input(key="job_command").input(f"{sys.executable} -c pass")
    at.selectbox(key="restart_mode").set_value("on_failure").run()
    assert not at.number_input(key="stall_timeout_s").disabled
    at.number_input(key="stall_timeout_s").set_value(45.0)
    at.button(key="start_button").click().run()
    assert not at.exception and not errors(at), errors(at)
    run_id = at.session_state["run_id"]
    saved = wait_for(lambda: (RunStore(runs_dir).path(run_id) / "state.json").exists()
                     and RunStore(runs_dir).load(run_id), 120, "the run's record")
    assert saved.job["restart"] == {**saved.job["restart"], "mode": "on_failure", "stall_timeout_s": 45.0}
    wait_for(lambda: not RunStore(runs_dir).load(run_id).live, 120, "the one-line job to finish")


@pytest.mark.slow
def test_the_keras_fit_example_launches_from_the_form_as_a_command_job(page, runs_dir):
    """Issue 26: a Keras user's script (examples/keras_fit.py, one added callback) started from
    the Launch form's Command field trains on both local workers with curves and checkpoints."""
    from backend import checkpoints
    from backend.runs.launcher import attach
    at = page("launch", cluster_rows=local_rows())
    assert "Command" in at.radio(key="job_source").options
    at.radio(key="job_source").set_value("Command").run()
    at.text_input(key="job_command").input("examples/keras_fit.py --epochs 1 --steps 20")
    at.button(key="start_button").click().run()
    assert not at.exception and not errors(at), errors(at)
    run_id = at.session_state["run_id"]
    wait_for(lambda: (RunStore(runs_dir).path(run_id) / "state.json").exists()
             and not RunStore(runs_dir).load(run_id).live, 240, "the fit job to end")
    run = attach(run_id, store=RunStore(runs_dir))
    assert run.state.phase == "finished", run.state
    assert [c["step"] for c in checkpoints.list_checkpoints(run)] == [20]
    lines = run.transport(run.state.chief.name).run(
        ["cat", f"{run.state.chief.remote_run_dir}/metrics.jsonl"]).stdout.splitlines()
    assert {__import__("json").loads(x)["task"] for x in lines} == {"worker-0", "worker-1"}


def test_a_project_folder_is_previewed_and_reaches_the_job(page, runs_dir, tmp_path):
    """Issue 49: the Launch form takes a project folder, says what it will send and what stays
    here before Start, and the started run ships it (its own copy, named in the run's job)."""
    import sys
    from tests.unit.test_project import make_project
    folder = make_project(tmp_path / "laptop")
    (folder / "train.py").write_text("import models.net\n")
    at = page("launch", cluster_rows=local_rows())
    at.radio(key="job_source").set_value("Command").run()
    at.text_input(key="job_command").input(f"{sys.executable} train.py")
    at.text_input(key="job_project").input(str(tmp_path / "nowhere")).run()
    assert any(c.value.startswith("project: no folder at") for c in at.caption), [c.value for c in at.caption]
    at.text_input(key="job_project").input(str(folder)).run()
    assert any(c.value == "Will send 5 files (0.00 MiB); 6 left out (.gitignore)"
               for c in at.caption), [c.value for c in at.caption]
    at.checkbox(key="job_pip_install").check().run()   # it has no requirements: pip is not run
    at.button(key="start_button").click().run()
    assert not at.exception and not errors(at), errors(at)
    run_id = at.session_state["run_id"]
    saved = wait_for(lambda: (RunStore(runs_dir).path(run_id) / "state.json").exists()
                     and RunStore(runs_dir).load(run_id), 120, "the run's record")
    assert saved.job["project"] == str(RunStore(runs_dir).path(run_id) / "project.tar")
    assert saved.job["pip_install"] is True
    wait_for(lambda: not RunStore(runs_dir).load(run_id).live, 120, "the one-line job to finish")
    assert RunStore(runs_dir).load(run_id).phase == "finished"


def test_a_viewer_is_offered_no_start_and_is_told_why(page, runs_dir, monkeypatch):
    """Roles (issue 48): the page asks the same roles file the backend enforces, so it offers no
    button its user may not use; a mistake in the file says what to fix there too."""
    import getpass
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    runs_dir.mkdir(parents=True, exist_ok=True)
    (runs_dir / "roles.yaml").write_text("users:\n  alice@example.org: admin\ndefault: viewer\n")
    at = page("launch", cluster_rows=local_rows())
    start = at.button(key="start_button")
    assert start.disabled and "is a viewer: launch is for operators" in start.help, start.help
    (runs_dir / "roles.yaml").write_text(f"users:\n  {getpass.getuser()}: operator\n")
    at.run()
    assert not at.button(key="start_button").disabled
    (runs_dir / "roles.yaml").write_text("users:\n  bob: superuser\n")
    at.run()   # a mistake in the file: nobody may look until it is fixed, and the page says where
    assert not at.exception and [t.value for t in at.title] == ["No access"]
    assert "unknown role 'superuser'" in errors(at)[0] and not [b for b in at.button if b.key == "start_button"]
