"""Who can reach the console and what it leaves readable (issue 27): the Host header is checked
(DNS rebinding), uploads are small, a public address is warned about, the runs folder and saved
job files are the owner's only, and job output reaches the page as plain text."""
from __future__ import annotations

import os
import stat
import tomllib

import pytest

from console import tokens
from tests.conftest import ROOT


@pytest.mark.parametrize("header", ["localhost:8501", "127.0.0.1:8501", "[::1]:8501", "LOCALHOST",
                                    "10.1.2.3:8501", "[fe80::1]:8501", "console.lab:8501"])
def test_names_the_console_is_served_under_pass(header, monkeypatch):
    monkeypatch.setenv(tokens.HOSTS_ENV, "console.lab, other.lab")
    assert tokens.host_refusal(header, address="127.0.0.1") is None


def test_a_rebound_name_is_refused_with_what_to_do(monkeypatch):
    """A page on attacker.example whose DNS name now points at 127.0.0.1 sends Host: attacker..."""
    monkeypatch.delenv(tokens.HOSTS_ENV, raising=False)
    text = tokens.host_refusal("attacker.example:8501", address="127.0.0.1")
    assert "attacker.example" in text and tokens.HOSTS_ENV in text and "127.0.0.1" in text
    assert tokens.host_refusal("attacker.example", address="0.0.0.0") is not None
    assert tokens.host_refusal("box.lab:8501", address="box.lab") is None   # the --address given


def test_uploads_are_capped_at_1_mb_in_the_config_and_the_launcher(monkeypatch, tmp_path):
    monkeypatch.setenv("TFCONSOLE_RUNS", str(tmp_path))
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == 1
    argv = _launch(monkeypatch, ["--port", "8599"])
    assert argv[argv.index("--server.maxUploadSize") + 1] == "1"


def test_every_interface_is_warned_about(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TFCONSOLE_RUNS", str(tmp_path))
    monkeypatch.delenv(tokens.ENV, raising=False)
    _launch(monkeypatch, ["--address", "0.0.0.0", "--port", "8599"])
    err = capsys.readouterr().err
    assert "0.0.0.0" in err and "anyone who can reach this machine" in err
    assert "TensorFlow's own ports" in err
    _launch(monkeypatch, ["--address", "127.0.0.1", "--port", "8599"])
    assert "warning" not in capsys.readouterr().err


def _launch(monkeypatch, args: list[str]) -> list[str]:
    """``python -m console ARGS`` with Streamlit replaced by a recorder: its argv."""
    import console.__main__ as launcher
    seen: list = []

    class FakeProc:
        def __init__(self, argv, env=None):
            seen.append(argv)

        def poll(self):
            return 0

        def wait(self):
            return 0

    monkeypatch.setattr(launcher.subprocess, "Popen", FakeProc)
    monkeypatch.setattr(launcher.signal, "signal", lambda *a: None)
    assert launcher.main(args) == 0
    return seen[0]


def test_the_runs_folder_is_made_for_its_owner_only(tmp_path):
    from backend.runs.store import RunStore
    old = os.umask(0o022)
    try:
        RunStore(tmp_path / "runs").reserve("r1")
        RunStore(tmp_path / "other").locked("r2").__enter__()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "runs").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "other").stat().st_mode) == 0o700


def test_a_saved_job_file_is_readable_by_its_owner_only(tmp_path):
    """A job's env may hold a token (WANDB_API_KEY): written 0644 before."""
    from backend.config.spec import job_from_dict, load_job, save_job
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "env": {"WANDB_API_KEY": "secret"}})
    old = os.umask(0o022)
    try:
        save_job(job, tmp_path / "job.yaml")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "job.yaml").stat().st_mode) == 0o600
    assert load_job(tmp_path / "job.yaml").env == {"WANDB_API_KEY": "secret"}
