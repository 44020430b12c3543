"""What a short host command costs with one login per command (an exec channel each, as before)
against the served channel (one login per host; backend/hosts/served.py), side by side in one run,
on a real loopback sshd whose login shell is bash, with and without a slow ~/.bashrc.

    .venv/bin/python bench/host_command_rtt.py [--calls 20] [--bashrc-sleep 0.5]

Each round times ``--calls`` hostctl `progress` commands (what the keeper asks every second) one
after another, exec then served, alternated; prints min / median / max of the per-command time."""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.engines.bundle import harness_bundle  # noqa: E402
from backend.hosts import remote  # noqa: E402
from backend.hosts.ssh import SSHOptions, SSHTransport  # noqa: E402
from rig import sshd  # noqa: E402


def _host(folder: Path, bashrc: str):
    key = folder / "id_ed25519"
    sshd.keygen(key)
    (folder / "authorized_keys").write_text((folder / "id_ed25519.pub").read_text())
    home = folder / "home"
    home.mkdir()
    (home / ".bashrc").write_text(bashrc)
    host = sshd.make_host(folder / "sshd", "127.0.0.42", folder / "authorized_keys", home=str(home), shell="/bin/bash")
    (folder / "known_hosts").write_text(sshd.known_hosts_line(host))
    options = SSHOptions(known_hosts=str(folder / "known_hosts"), ssh_config=str(folder / "none"),
                         allow_agent=False, look_for_keys=False)
    return host, home, key, options


class _Exec:
    """The transport as it was: every command an exec channel of its own (a login each)."""

    def __init__(self, real):
        self.real, self.host = real, real.host

    def run(self, argv, **kw):
        return self.real.run(argv, **kw)


def _per_call(h, calls: int) -> float:
    began = time.monotonic()
    for _ in range(calls):
        remote.progress(h)
    return (time.monotonic() - began) / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bashrc-sleep", type=float, default=0.5, help="seconds the slow ~/.bashrc sleeps")
    a = p.parse_args()
    for label, bashrc in (("quick ~/.bashrc", "true\n"), (f"~/.bashrc sleeping {a.bashrc_sleep:g} s", f"sleep {a.bashrc_sleep}\n")):
        with tempfile.TemporaryDirectory() as tmp:
            host, home, key, options = _host(Path(tmp), bashrc)
            transport = SSHTransport(host.address, port=host.port, identity_file=str(key), options=options)
            try:
                served = remote.Host(transport, sys.executable, str(home / "run"))
                remote.install(served, harness_bundle())
                plain = remote.Host(_Exec(transport), sys.executable, str(home / "run"))
                remote.progress(served)   # the server's one login, not counted
                got = {"exec": [], "served": []}
                for _ in range(a.rounds):
                    got["exec"].append(_per_call(plain, a.calls))
                    got["served"].append(_per_call(served, a.calls))
                for name, values in got.items():
                    ms = sorted(v * 1000 for v in values)
                    print(f"{label:28s} {name:7s} per command: min {ms[0]:7.1f} ms  median "
                          f"{statistics.median(ms):7.1f} ms  max {ms[-1]:7.1f} ms  ({a.rounds} x {a.calls} calls)")
            finally:
                transport.close()
                host.stop()


if __name__ == "__main__":
    main()
