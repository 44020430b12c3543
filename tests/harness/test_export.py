"""Export from a mid-run checkpoint of a real two-worker run."""
import hashlib
import json
import os
import shutil
import subprocess

from .conftest import SYNTHETIC, host_argv, worker_env

FAILED = 3   # hostctl's protocol: export.py answers in it


def export(run_dir, *args):
    return subprocess.run([*host_argv(run_dir, "export"), "--run-dir", run_dir, "--job", SYNTHETIC, *args],
                          capture_output=True, text=True, timeout=300, env=worker_env(None))


def tree_digest(folder):
    h = hashlib.sha256()
    for d, _, files in sorted(os.walk(folder)):
        for f in sorted(files):
            p = os.path.join(d, f)
            st = os.stat(p)
            h.update(f"{os.path.relpath(p, folder)}:{st.st_mtime_ns}:".encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def test_export_verify_and_never_overwrite(trained_run):
    run = trained_run.run_dir
    first = export(run, "--step", "100", "--name", "first")
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.load(open(os.path.join(run, "exports", "first", "result.json")))
    assert json.loads(first.stdout.splitlines()[-1]) == result   # the answer hostctl relays
    assert result["step"] == 100 and result["match"] is True
    assert result["max_abs_diff"] <= 1e-5
    for fmt in ("savedmodel", "keras"):
        assert os.path.exists(result["paths"][fmt]) and result["sizes"][fmt] > 0
    digest = tree_digest(os.path.join(run, "exports", "first"))

    second = export(run, "--formats", "keras")           # latest checkpoint, default name
    assert second.returncode == 0, second.stderr[-3000:]
    names = sorted(os.listdir(os.path.join(run, "exports")))
    assert len(names) == 2 and names[1].startswith("step-200-"), names
    assert tree_digest(os.path.join(run, "exports", "first")) == digest

    again = export(run, "--step", "150", "--name", "first")
    assert again.returncode == FAILED and "already exists" in again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["error"].startswith("EXPORT REFUSED: export 'first' already exists")
    assert tree_digest(os.path.join(run, "exports", "first")) == digest
    assert not [n for n in os.listdir(os.path.join(run, "exports")) if n.startswith(".tmp-")]


def test_export_refuses_a_partial_checkpoint_naming_the_next_good_one(trained_run, tmp_path):
    run = str(tmp_path / "copy")
    shutil.copytree(os.path.join(trained_run.run_dir, "checkpoints"),
                    os.path.join(run, "checkpoints"))
    os.unlink(os.path.join(run, "checkpoints", "ckpt-150.meta.json"))   # save cut short
    out = export(run, "--step", "150")
    assert out.returncode == FAILED and "EXPORT REFUSED" in out.stderr
    assert "step 150 is not complete" in out.stderr and "next good one is step 100" in out.stderr
    assert not os.path.exists(os.path.join(run, "exports")) or \
        not os.listdir(os.path.join(run, "exports"))


def test_export_of_a_corrupt_checkpoint_fails_and_cleans_up(trained_run, tmp_path):
    run = str(tmp_path / "copy")
    shutil.copytree(os.path.join(trained_run.run_dir, "checkpoints"),
                    os.path.join(run, "checkpoints"))
    with open(os.path.join(run, "checkpoints", "ckpt-200.data-00000-of-00001"), "r+b") as fh:
        fh.truncate(10)
    out = export(run, "--name", "bad")
    assert out.returncode == FAILED and "EXPORT FAILED" in out.stderr, out.stderr[-2000:]
    assert "next good one is step 150" in out.stderr
    assert os.listdir(os.path.join(run, "exports")) == []


def test_export_latest_holds_its_checkpoint_while_retention_rotates(launcher, tmp_path):
    """Keep one checkpoint, no grace, a save every 5 steps: without the export's hold its step
    would be deleted long before TensorFlow had started in the export process."""
    from tests.conftest import wait_for
    run = str(tmp_path / "run")
    folder = os.path.join(run, "checkpoints")
    launcher.start(run, n=2, params=("epochs=1", "steps_per_epoch=1000000", "log_every=5",
                                     "checkpoint_every=5", "keep_checkpoints=1", "checkpoint_grace_s=0",
                                     "pace_s=0.02"))   # a save every 0.1 s or so: the cores go to the export
    wait_for(lambda: ckpt_steps(folder), 180, "a first checkpoint")
    out = export(run, "--formats", "keras", "--name", "rotating")
    assert out.returncode == 0, out.stderr[-3000:]
    step = json.load(open(os.path.join(run, "exports", "rotating", "result.json")))["step"]
    assert max(ckpt_steps(folder)) > step            # training saved newer ones meanwhile
    # Released at the end: the next retention pass deletes it like any other old checkpoint.
    wait_for(lambda: step not in ckpt_steps(folder), 60, f"retention to drop step {step}")
    assert os.listdir(os.path.join(folder, "holds")) == []


def ckpt_steps(folder) -> list[int]:
    return sorted(int(n[len("ckpt-"):-len(".index")]) for n in os.listdir(folder)
                  if n.startswith("ckpt-") and n.endswith(".index")) if os.path.isdir(folder) else []
