"""The launch form's first values from a job dict: the built-in default's, or a live run's job,
which a new session (another tab, a restarted console) shows instead of the defaults."""
from console.forms import launch_form

EXAMPLES = ("digits.py", "synthetic.py")


def test_an_example_run_fills_its_example_params_and_restart_policy():
    form = launch_form({"kind": "harness", "module": "/home/op/tfconsole/runs/r1.ab12cd/job/digits.py",
                        "params": {"epochs": 1, "steps_per_epoch": 5000},
                        "restart": {"mode": "on_failure", "max_restarts": 7}}, EXAMPLES)
    assert (form["job_source"], form["job_example"]) == ("Example", "digits.py")
    assert form["param_epochs"] == 1 and form["param_steps_per_epoch"] == 5000
    assert form["param_log_every"] == 10   # unset: the harness default
    assert (form["restart_mode"], form["max_restarts"]) == ("on_failure", 7)


def test_a_module_of_the_operators_own_is_shown_by_its_path():
    form = launch_form({"kind": "harness", "module": "/srv/jobs/my_job.py"}, EXAMPLES)
    assert (form["job_source"], form["job_module"]) == ("Module path", "/srv/jobs/my_job.py")
    assert form["restart_mode"] == "never"


def test_a_command_job_is_shown_quoted_as_typed():
    form = launch_form({"kind": "command", "command": ["python", "train.py", "--name", "two words"]}, EXAMPLES)
    assert (form["job_source"], form["job_command"]) == ("Command", "python train.py --name 'two words'")


def test_pace_is_seconds_and_the_other_params_whole_numbers(tmp_path):
    from console.forms import build_job
    form = launch_form({"kind": "harness", "module": "synthetic.py", "params": {"pace_s": 0.02}}, EXAMPLES)
    assert form["param_pace_s"] == 0.02 and form["param_epochs"] == 3
    (tmp_path / "job.py").write_text("")
    job = build_job(source="module", module=str(tmp_path / "job.py"), params={"pace_s": 0.05, "epochs": 2.0})
    assert job.params == {"pace_s": 0.05, "epochs": 2}


def test_the_form_values_give_back_the_job_they_show(tmp_path):
    """Start reads the form's values at the click (console/forms.py, job_from_form): the job a
    form shows, read back, is that job again; a command job's params are not the harness's."""
    from console.forms import job_from_form
    (tmp_path / "digits.py").write_text("")
    job = {"kind": "harness", "module": str(tmp_path / "digits.py"), "params": {"epochs": 1, "pace_s": 0.5},
           "restart": {"mode": "on_failure", "max_restarts": 7}}
    back = job_from_form(launch_form(job, EXAMPLES), tmp_path)
    assert back.module == str(tmp_path / "digits.py") and back.params["epochs"] == 1
    assert back.params["pace_s"] == 0.5 and back.restart.max_restarts == 7
    command = job_from_form(launch_form({"kind": "command", "command": ["python", "a b.py"]}, EXAMPLES), tmp_path)
    assert list(command.command) == ["python", "a b.py"]
