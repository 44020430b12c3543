"""The record of what ran: code (hash, git commit, bounded diff), hosts' versions, what differs."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.runs import record
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState

ROOT = Path(__file__).resolve().parents[2]


def git(folder: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    folder = tmp_path / "proj" / "jobs"
    folder.mkdir(parents=True)
    git(tmp_path / "proj", "init", "-q")
    (folder / "job.py").write_text("LR = 0.1\n")
    git(tmp_path / "proj", "add", ".")
    git(tmp_path / "proj", "commit", "-q", "-m", "first")
    return folder


def test_a_clean_module_in_git_records_its_hash_and_commit(repo):
    found = record.build(str(repo / "job.py"), str(repo / "job.py"))
    assert found["module"] == {"name": "job.py", "sha256": hashlib.sha256(b"LR = 0.1\n").hexdigest(), "bytes": 9}
    assert found["git"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert (found["git"]["dirty"], found["git"]["diff"]) == (False, "")


def test_uncommitted_changes_are_recorded_and_bounded(repo):
    (repo / "job.py").write_text("LR = 0.2\n")
    (repo / "notes.txt").write_text("new")
    found = record.build(str(repo / "job.py"), str(repo / "job.py"))["git"]
    assert found["dirty"] and "-LR = 0.1" in found["diff"] and "+LR = 0.2" in found["diff"]
    assert found["untracked"] == ["notes.txt"]
    (repo / "job.py").write_text("x = 1\n" * 40_000)   # a diff far over the bound
    big = record.build(str(repo / "job.py"), str(repo / "job.py"))["git"]
    assert big["diff_truncated"] and len(big["diff"].encode()) <= record.MAX_DIFF
    assert big["diff_bytes"] > record.MAX_DIFF


def test_a_folder_outside_git_has_no_git_part(tmp_path):
    (tmp_path / "job.py").write_text("x")
    assert record.build(str(tmp_path / "job.py"), str(tmp_path / "job.py"))["git"] is None


def test_hosts_and_the_chiefs_packages_come_from_versions_json():
    versions = {"chief-0": {"host": "a", "python": "3.12.1", "tensorflow": "2.18.0", "keras": "3.8.0",
                            "cuda": "12.5", "packages": ["numpy==2.0.1", "tensorflow==2.18.0"]},
                "worker-0": {"host": "b", "python": "3.12.1", "tensorflow": "2.18.0", "keras": "3.8.0",
                             "cuda": "12.5", "packages": ["numpy==1.26.4"]},
                "worker-1": {}}   # not started yet: nothing recorded for it
    part = record.host_part(versions, "chief-0")
    assert list(part["hosts"]) == ["chief-0", "worker-0"]
    assert part["hosts"]["worker-0"] == {"host": "b", "python": "3.12.1", "tensorflow": "2.18.0",
                                         "keras": "3.8.0", "cuda": "12.5"}
    assert part["packages"] == ["numpy==2.0.1", "tensorflow==2.18.0"]


def saved_run(store: RunStore, run_id: str, *, params: dict, host: str, code: dict, hosts: dict,
              packages: list, env: dict | None = None) -> None:
    store.reserve(run_id)
    job = {"kind": "harness", "module": f"/x/{run_id}/job.py", "params": params, **({"env": env} if env else {})}
    cluster = {"tasks": [{"role": "chief", "host": host, "tf_port": 2222}, {"role": "worker", "host": "w", "tf_port": 2223}]}
    store.save(RunState(run_id, 1000.0, cluster, job,
                        [TaskState("chief-0", 0, host, f"tfconsole/{run_id}")], [Attempt(1, 1000.0, last_step=5)],
                        phase=Phase.FINISHED))
    record.write(store.path(run_id), {**code, "hosts": hosts, "packages": packages})


CODE_A = {"module": {"name": "job.py", "sha256": "a" * 64, "bytes": 9},
          "git": {"commit": "c1", "dirty": False, "diff": "", "diff_bytes": 0, "diff_sha256": ""}}
CODE_B = {"module": {"name": "job.py", "sha256": "b" * 64, "bytes": 9},
          "git": {"commit": "c1", "dirty": True, "diff": "+x", "diff_bytes": 2, "diff_sha256": "d" * 64}}
HOSTS_A = {"chief-0": {"host": "h1", "python": "3.12.1", "tensorflow": "2.18.0", "keras": "3.8.0", "cuda": "12.5"}}
HOSTS_B = {"chief-0": {"host": "h1", "python": "3.12.1", "tensorflow": "2.19.0", "keras": "3.8.0", "cuda": "12.5"}}


def test_two_runs_differ_in_parameters_hosts_versions_code_and_packages(tmp_path):
    store = RunStore(tmp_path / "runs")
    saved_run(store, "a", params={"lr": 0.1, "epochs": 2}, host="h1", code=CODE_A, hosts=HOSTS_A,
              packages=["numpy==2.0.1", "six==1.16.0"])
    saved_run(store, "b", params={"lr": 0.2, "epochs": 2}, host="h2", code=CODE_B, hosts=HOSTS_B,
              packages=["numpy==2.1.0", "six==1.16.0"])
    rows = record.differences(record.view(store.load("a"), store.path("a")),
                              record.view(store.load("b"), store.path("b")))
    got = {(r["what"], r["item"]): (r["A"], r["B"]) for r in rows}
    assert got[("parameters", "lr")] == ("0.1", "0.2")
    assert got[("hosts", "tasks[0].host")] == ("h1", "h2")
    assert got[("versions", "chief-0.tensorflow")] == ("2.18.0", "2.19.0")
    assert got[("code", "module sha256")] == ("a" * 64, "b" * 64)
    assert got[("code", "uncommitted changes")] == ("none", "2 bytes, sha256 dddddddddddd")
    assert got[("packages", "numpy")] == ("2.0.1", "2.1.0")
    # what is the same is not listed
    assert not {("parameters", "epochs"), ("code", "git commit"), ("packages", "six"),
                ("versions", "chief-0.keras")} & set(got)


def test_the_view_masks_env_values(tmp_path):
    store = RunStore(tmp_path / "runs")
    saved_run(store, "a", params={}, host="h1", code=CODE_A, hosts={}, packages=[], env={"API_KEY": "s3cret"})
    shown = record.view(store.load("a"), store.path("a"))
    assert shown["job"]["env"] == {"API_KEY": "***"} and "s3cret" not in json.dumps(shown)


def cli(*args: str, runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_runs_show_prints_the_record_and_runs_still_lists(tmp_path):
    store = RunStore(tmp_path / "runs")
    saved_run(store, "a", params={"lr": 0.1}, host="h1", code=CODE_B, hosts=HOSTS_A, packages=["numpy==2.0.1"])
    shown = cli("runs", "show", "a", "--json", runs=store.root)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["code"]["module"]["sha256"] == "b" * 64 and data["code"]["git"]["diff"] == "+x"
    assert data["job"]["params"] == {"lr": 0.1} and data["hosts"] == HOSTS_A
    assert data["packages"] == ["numpy==2.0.1"] and data["cluster"]["tasks"][0]["host"] == "h1"
    text = cli("runs", "show", "a", runs=store.root).stdout
    assert "module sha256: " + "b" * 64 in text and "uncommitted changes: 2 bytes" in text
    assert "chief-0: host h1, python 3.12.1, tensorflow 2.18.0, keras 3.8.0, cuda 12.5" in text
    assert cli("runs", runs=store.root).stdout.startswith("a  finished")
    missing = cli("runs", "show", "nope", runs=store.root)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr
