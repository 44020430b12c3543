"""Latency from a metric line appended on the producer's side to its arrival in the store.

The path measured is the real one: file append -> watchdog (inotify, or polling) -> the watch agent ->
pipe or SSH channel -> RunMonitor's reader thread -> batch commit (mirror + offsets file) ->
MetricsStore.add_many. Times come from one clock: producer and store share this process.

    python bench/watch_latency.py                          # local pipe (LocalTransport)
    python bench/watch_latency.py --poll                   # PollingObserver, 0.5 s interval
    python bench/watch_latency.py --poll --poll-interval 0.1
    python bench/watch_latency.py --noise 2000             # plus 2,000 log lines/s of TF noise
    python bench/watch_latency.py --ssh-loopback           # real sshd on 127.0.0.2 (rig/sshd.py)
    python bench/watch_latency.py --ssh HOST:PORT          # your own sshd (keys from ~/.ssh)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from backend.watch.metrics import MetricsStore  # noqa: E402
from backend.watch import RunMonitor  # noqa: E402
from rig.watch_run import append, make_run, metric  # noqa: E402


class TimedStore(MetricsStore):
    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[int, float] = {}

    def add_columns(self, cols):
        now = time.perf_counter()
        for step in cols["step"].tolist():
            self.arrived.setdefault(step, now)
        return super().add_columns(cols)


def loopback_ssh(tmp: Path):
    """A real sshd on 127.0.0.2 with a fresh client key; returns (factory, stop)."""
    from backend.hosts.ssh import SSHOptions, SSHTransport
    from rig import sshd
    sshd.keygen(tmp / "id_ed25519")
    (tmp / "authorized_keys").write_text((tmp / "id_ed25519.pub").read_text())
    host = sshd.make_host(tmp / "sshd", "127.0.0.2", tmp / "authorized_keys")
    (tmp / "known_hosts").write_text(sshd.known_hosts_line(host))
    opts = SSHOptions(known_hosts=str(tmp / "known_hosts"), ssh_config=str(tmp / "no_config"),
                      allow_agent=False, look_for_keys=False)
    return (lambda: SSHTransport(host.address, port=host.port,
                                 identity_file=str(tmp / "id_ed25519"), options=opts)), host.stop


def transport_factory(args, tmp: Path):
    if args.ssh_loopback:
        return loopback_ssh(tmp)
    if args.ssh:   # HOOK: the operator's own sshd; it must see this run directory (loopback)
        from backend.hosts.ssh import SSHTransport
        host, _, port = args.ssh.partition(":")
        return (lambda: SSHTransport(host, port=int(port or 22))), (lambda: None)
    from backend.hosts.local import LocalTransport
    return LocalTransport, (lambda: None)


def noise(run: Path, rate: int, stop: threading.Event) -> None:
    line = "I0000 00:00:00.000000 1 cpu_feature_guard.cc:210] This TensorFlow binary is optimized\n"
    while not stop.is_set():
        append(run / "logs/worker-1.log", line * max(1, rate // 100))
        time.sleep(0.01)


def measure(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="watch-bench-"))
    run = make_run(tmp / "run")
    factory, stop_transport = transport_factory(args, tmp)
    store = TimedStore()
    mon = RunMonitor(factory, str(run), str(tmp / "local"), store, python=sys.executable,
                     poll=args.poll, poll_interval=args.poll_interval).start()
    stop = threading.Event()
    if args.noise:
        threading.Thread(target=noise, args=(run, args.noise, stop), daemon=True).start()
    try:
        time.sleep(1.5)                      # agent started and watching
        written = {}
        for step in range(args.lines):
            written[step] = time.perf_counter()
            append(run / "metrics.jsonl", metric("chief-0", step))
            time.sleep(1.0 / args.rate)
        deadline = time.monotonic() + 10
        while len(store.arrived) < args.lines and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        mon.stop()
        stop_transport()
    lat = np.array([store.arrived[s] - written[s] for s in written if s in store.arrived]) * 1e3
    if not len(lat):
        raise SystemExit("no line arrived: check the transport (see the monitor's last_error)")
    return {"lines": args.lines, "arrived": len(lat), "median_ms": float(np.median(lat)),
            "p99_ms": float(np.percentile(lat, 99)), "max_ms": float(lat.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--rate", type=float, default=50.0, help="metric lines per second")
    ap.add_argument("--noise", type=int, default=0, help="log lines per second on another file")
    ap.add_argument("--poll", action="store_true")
    ap.add_argument("--poll-interval", type=float, default=0.5)
    ap.add_argument("--ssh", metavar="HOST:PORT", help="run the agent over this SSH server")
    ap.add_argument("--ssh-loopback", action="store_true", help="start a real sshd on 127.0.0.2")
    args = ap.parse_args()
    r = measure(args)
    via = "ssh" if args.ssh or args.ssh_loopback else "local pipe"
    mode = f"poll every {args.poll_interval} s" if args.poll else "inotify"
    print(f"{via}, {mode}, noise {args.noise}/s: {r['arrived']}/{r['lines']} lines, "
          f"median {r['median_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms")


if __name__ == "__main__":
    main()
