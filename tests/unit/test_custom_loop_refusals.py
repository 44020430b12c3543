"""Custom loops (issue 36): a save the checkpoint list will never show is an error that says why,
and Export's refusal names the one missing call for the kind of script it sees.

Real processes and files: the run bundle unpacked into a run folder, the client library and the
harness's hostctl.py / export.py run as a worker and the console run them.
"""
from __future__ import annotations

import json
import subprocess
import sys

from backend.hosts.remote import FAILED
from tests.unit.test_client import _env, _python, _unpack


def test_a_save_the_list_will_never_show_is_answered_with_why_not_a_step(tmp_path):
    run = tmp_path / "run"
    _unpack(run)
    (run / "requests").mkdir()
    (run / "requests" / "save-x.json").write_text("{}")
    ckpts = run / "checkpoints"
    ckpts.mkdir()
    # What a plain CheckpointManager.save() leaves: numbered by its save counter, no metadata.
    (ckpts / "ckpt-3.index").write_bytes(b"x")
    (ckpts / "ckpt-3.data-00000-of-00001").write_bytes(b"x")
    out = _python("import tfconsole\nprint(tfconsole.should_save(), tfconsole.saved(71))",
                  _env(run, 0), tmp_path)
    assert out.split()[-2:] == ["True", "False"]
    assert "Save now NOT answered with step 71" in out
    answer = json.loads((run / "requests" / "save-x.done").read_text())
    assert answer["step"] is None and "ckpt-71" in answer["error"]
    assert "checkpoint_number=step" in answer["error"] and "ckpt-3.index" in answer["error"]
    # What the console's Save now reads: a refusal saying why, never "saved at step 71".
    asked = subprocess.run([sys.executable, "-S", str(run / "lib"), "hostctl", "save-done",
                            "--run", str(run), "--name", "save-x.json"],
                           capture_output=True, text=True, timeout=60)
    assert asked.returncode == FAILED, asked.stdout
    error = json.loads(asked.stdout.strip().splitlines()[-1])["error"]
    assert "saved at step 71 but the checkpoint list will never show it" in error


def test_a_listed_save_is_answered_with_its_step(tmp_path):
    run = tmp_path / "run"
    _unpack(run)
    (run / "requests").mkdir()
    (run / "requests" / "save-y.json").write_text("{}")
    (run / "checkpoints").mkdir()
    for name in ("ckpt-70.index", "ckpt-70.meta.json"):
        (run / "checkpoints" / name).write_text("{}")
    out = _python("import tfconsole\nprint(tfconsole.should_save(), tfconsole.saved(70))",
                  _env(run, 0), tmp_path)
    assert out.split()[-2:] == ["True", "True"]
    assert json.loads((run / "requests" / "save-y.done").read_text())["step"] == 70


def _export_refusal(run) -> str:
    out = subprocess.run([sys.executable, str(run / "lib"), "export", "--run-dir", str(run),
                          "--step", "5"], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == FAILED, out.stdout + out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["error"]


def test_export_of_a_custom_loop_without_a_model_names_the_loops_call(tmp_path):
    run = tmp_path / "run"
    _unpack(run)
    (run / "checkpoints").mkdir()
    for name in ("ckpt-5.index", "ckpt-5.meta.json"):
        (run / "checkpoints" / name).write_text("{}")
    (run / "train.json").write_text(json.dumps({"source": "tfconsole.Loop"}))
    loop = _export_refusal(run)
    assert loop.startswith("EXPORT REFUSED") and "tfconsole.Loop(strategy, checkpoint_manager, model=model)" in loop
    assert "KerasCallback" not in loop
    (run / "train.json").unlink()   # a script with neither: both calls, each for its kind
    neither = _export_refusal(run)
    assert "callbacks=[tfconsole.KerasCallback()]" in neither and "tfconsole.Loop(" in neither
