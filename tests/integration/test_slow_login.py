"""A host whose login shell is slow to start (a ~/.bashrc running `conda init`, `module load` or a
`pyenv init` waiting on a stale lock): every host command pays it, and the console's short
commands time out without saying why. Preflight measures what starting a command costs on each
host and, when it is slow, names the shell's startup files and the fix.

The host is a real sshd whose login shell is bash, as Debian's is (rig/sshd.py, ``shell``): bash
run for sshd reads ~/.bashrc before every command, so the sleep there is paid as on a real host."""
from __future__ import annotations

from backend.hosts.pool import Pool
from backend.hosts.preflight import run_preflight
from backend.hosts.ssh import SSHOptions
from backend.config.spec import cluster_from_dict
from rig import sshd
from tests.conftest import ssh_task


def _bash_host(tmp_path, client_key, bashrc: str):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text(bashrc)
    host = sshd.make_host(tmp_path / "sshd", "127.0.0.41", client_key.parent / "authorized_keys",
                          home=str(home), shell="/bin/bash")
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(host))
    options = SSHOptions(known_hosts=str(known), ssh_config=str(tmp_path / "no_ssh_config"),
                         allow_agent=False, look_for_keys=False)
    return host, home, options


def _preflight(host, home, options, client_key, python_path):
    cluster = cluster_from_dict({"tasks": [ssh_task(host, "worker", sshd.free_port(), client_key,
                                                    python_path, home / "work")]})
    with Pool(options) as pool:
        return run_preflight(cluster, pool)[0]


def test_preflight_names_a_slow_bashrc_and_how_to_fix_it(tmp_path, client_key, python_path):
    host, home, options = _bash_host(tmp_path, client_key, "sleep 1.5  # as a slow conda init\n")
    try:
        report = _preflight(host, home, options, client_key, python_path)
        login = report.checks["login"]
        assert report.ok and login["ok"] and login["seconds"] >= 1.5, report.checks
        assert "~/.bashrc" in login["slow"] and "/bin/bash" in login["slow"], login
        assert "return early for non-interactive shells" in login["slow"], login
        assert "SLOW" in report.row()["login"] and f"{login['seconds']:.2f} s" in report.row()["login"]
        # The same host with the fix the check names: quick, and nothing said.
        (home / ".bashrc").write_text("case $- in *i*) ;; *) return;; esac\nsleep 1.5\n")
        report = _preflight(host, home, options, client_key, python_path)
        assert report.ok and report.checks["login"]["seconds"] < 1.0 and "slow" not in report.checks["login"]
    finally:
        host.stop()


def test_a_login_that_never_finishes_fails_preflight_naming_the_startup_files(tmp_path, client_key, python_path,
                                                                                 monkeypatch):
    """A `pyenv init` waiting 60 s on a stale lock: the check fails at its limit (2 s here, 20 s
    by default), saying that the shell's startup files run before every command, and the probe
    is not started after it (it would wait as long again)."""
    from backend.hosts import preflight
    monkeypatch.setattr(preflight, "LOGIN_LIMIT_S", 2.0)
    host, home, options = _bash_host(tmp_path, client_key, "sleep 6  # pyenv init on a stale lock (ends by itself: nothing left)\n")
    try:
        report = _preflight(host, home, options, client_key, python_path)
        assert not report.ok and report.checks["ssh"]["ok"], report.checks
        assert "did not even start within 2 s" in report.checks["login"]["error"]
        assert "return early for non-interactive shells" in report.checks["login"]["error"]
        assert "python" not in report.checks   # not probed after it
    finally:
        host.stop()


def test_short_host_commands_pay_one_login_per_host_not_one_per_command(tmp_path, client_key, python_path):
    """Every login runs ~/.bashrc, which here writes a line each time: ten short host commands
    (status, progress, a file read: what a live run asks every second) log in once, over the
    host's served channel (backend/hosts/served.py), where each used to log in anew. A task
    started through it outlives nothing: stop leaves no process, and closing the transport ends
    the server itself."""
    from backend.engines.bundle import harness_bundle
    from backend.hosts import remote
    from backend.hosts.ssh import SSHTransport
    from tests.conftest import ps, wait_for
    logins = tmp_path / "logins"
    host, home, options = _bash_host(tmp_path, client_key, f"echo login >> {logins}\n")
    transport = SSHTransport(host.address, port=host.port, identity_file=str(client_key), options=options)
    try:
        h = remote.Host(transport, python_path, str(home / "run"))
        remote.install(h, harness_bundle())                # an exec channel of its own (an upload)
        before = logins.read_text().count("login")
        sleeper = [python_path, "-c", "import time; time.sleep(120)"]
        remote.start(h, [{"task": "worker-0", "argv": sleeper, "env": {}}], wait_s=20, settle_s=0)
        for _ in range(4):
            assert remote.status(h, ["worker-0"])["worker-0"].state == "running"
            assert remote.read_file(h, "no-such-file") is None
        remote.progress(h)
        assert logins.read_text().count("login") - before == 1, logins.read_text()
        remote.stop(h, ["worker-0"], grace_s=5)
        assert remote.status(h, ["worker-0"])["worker-0"].state != "running"
        server = transport._served.get(python_path, 10).pid
        assert server and str(server) in [p.strip() for p in ps("pid=")]
    finally:
        transport.close()
        host.stop()
    wait_for(lambda: str(server) not in [p.strip() for p in ps("pid=")], 20,
             "the command server to end once its channel closed")
