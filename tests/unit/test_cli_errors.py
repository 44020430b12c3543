"""The command line's last resort: whatever escapes a command is one line on stderr, never a
traceback, and a non-zero exit code."""
from __future__ import annotations

import backend.cli.main as cli


def test_an_unexpected_error_is_one_line(monkeypatch, capsys, tmp_path):
    def broken(args):
        raise RuntimeError("something nobody planned for")
    monkeypatch.setattr(cli, "cmd_runs", broken)
    assert cli.main(["--runs", str(tmp_path), "runs"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "RuntimeError: something nobody planned for" in err and "report" in err


def test_an_unreadable_ssh_config_is_our_error(capsys, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("tasks:\n  - {role: worker, host: h2, tf_port: 2000}\n")
    # A folder where the ssh_config should be: reading it fails with an OSError.
    assert cli.main(["--ssh-config", str(tmp_path), "tf-config", str(cluster)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the ssh_config") and err.count("\n") == 1
