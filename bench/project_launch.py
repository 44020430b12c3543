"""Launch with a 50 MB project folder, first and second time, against rsync to the same hosts.

Two loopback sshd hosts (127.0.0.2, 127.0.0.3). The project folder holds 50 files of 1 MiB of
random bytes (incompressible: the worst case for the archive) and a small package. Each round:

- console, first launch: a fresh host cache (each host's `<workdir>/projects/` removed), so the
  packed folder crosses SSH to every host;
- console, second launch: the same folder again, so each host finds it by its hash and nothing
  is sent (counted on the hosts: a tar that arrives is a new file in their cache);
- rsync, first: `rsync -a` of the folder to an empty folder on each host, hosts in parallel;
- rsync, second: the same command again (nothing changed).

The job is `true` and preflight and the 3 s "did it die at once" check are skipped, so the figure
is the launch itself: pack (once per run), send, unpack, start. Needs Debian's `rsync`.

    .venv/bin/python bench/project_launch.py [--rounds 3] [--mib 50]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.engines import direct as hosts_engine  # noqa: E402
from backend.runs import launcher  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from rig.hosts import start_hosts  # noqa: E402
from rig import sshd  # noqa: E402


def make_project(root: Path, mib: int) -> Path:
    folder = root / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "nets").mkdir()
    (folder / "nets" / "__init__.py").write_text("WIDTH = 8\n")
    (folder / "train.py").write_text("from nets import WIDTH\nprint(WIDTH)\n")
    for n in range(mib):
        (folder / "data" / f"part-{n:03d}.bin").write_bytes(os.urandom(1 << 20))
    return folder


def console_launch(hosts, key, options, root: Path, folder: Path) -> float:
    cluster = cluster_from_dict({"tasks": [
        {"role": "worker", "host": h.address, "ssh_port": h.port, "tf_port": sshd.free_port(),
         "identity_file": str(key), "python": sys.executable, "workdir": str(root / f"work-{h.address}")}
        for h in hosts]})
    job = job_from_dict({"kind": "command", "command": ["true"], "project": str(folder)})
    start = time.perf_counter()
    run = launcher.launch(cluster, job, store=RunStore(root / "runs"), options=options,
                          preflight=launcher.Preflight.SKIP)
    took = time.perf_counter() - start
    run.stop(grace_s=2)
    run.pool.close()
    return took


def cached(root: Path, hosts) -> dict[tuple[str, int], int]:
    """(tar path, inode) -> size for every tar in the hosts' project caches. A tar that was sent
    is a new file (written beside its name, then renamed in), so a new inode; a hit only touches
    the old one's mtime."""
    found = {}
    for h in hosts:
        for path in (root / f"work-{h.address}" / "projects").glob("*.tar"):
            found[(str(path), path.stat().st_ino)] = path.stat().st_size
    return found


def rsync(hosts, key: Path, root: Path, folder: Path) -> float:
    def one(h) -> None:
        ssh = (f"ssh -p {h.port} -i {key} -o IdentitiesOnly=yes -o UserKnownHostsFile={root / 'known_hosts'}"
               f" -o StrictHostKeyChecking=yes -F /dev/null")
        subprocess.run(["rsync", "-a", "-e", ssh, f"{folder}/", f"{h.address}:{root / ('rsync-' + h.address)}/"],
                       check=True, stdout=subprocess.DEVNULL)
    start = time.perf_counter()
    with ThreadPoolExecutor(len(hosts)) as pool:
        list(pool.map(one, hosts))
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mib", type=int, default=50, help="size of the project's data, MiB (default 50)")
    a = p.parse_args()
    if not shutil.which("rsync"):
        sys.exit("bench/project_launch.py needs rsync: apt-get install rsync")
    hosts_engine.START_CHECK_S = 0.0
    rows = {"console first": [], "console second": [], "rsync first": [], "rsync second": []}
    sent = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts, key, options = start_hosts(root, 2)
        folder = make_project(root, a.mib)
        try:
            for _ in range(a.rounds):
                for h in hosts:
                    shutil.rmtree(root / f"work-{h.address}" / "projects", ignore_errors=True)
                    shutil.rmtree(root / f"rsync-{h.address}", ignore_errors=True)
                rows["console first"].append(console_launch(hosts, key, options, root, folder))
                before = cached(root, hosts)
                rows["console second"].append(console_launch(hosts, key, options, root, folder))
                sent.append(sum(size for key_, size in cached(root, hosts).items() if key_ not in before))
                rows["rsync first"].append(rsync(hosts, key, root, folder))
                rows["rsync second"].append(rsync(hosts, key, root, folder))
        finally:
            for h in hosts:
                h.stop()
    print(f"{a.mib} MiB project, 2 loopback SSH hosts, {a.rounds} rounds (median, then each round)")
    for name, values in rows.items():
        print(f"{name:>15}: {statistics.median(values):6.2f} s   " + " ".join(f"{v:.2f}" for v in values))
    print(f"bytes the second launch sent into the hosts' caches, each round: {sent}")


if __name__ == "__main__":
    main()
