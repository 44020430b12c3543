"""Submit -> first loss point: the same job through Slurm and on SSH hosts, side by side.

``python bench/slurm_submit.py [--rounds 2]`` (root; Slurm, munge, sshd, iproute2: ``make test``
installs them). It starts the two-node test cluster of rig/slurm_nodes.py (each node its own
network namespace) and two sshd hosts on 127.0.0.2 and 127.0.0.3 (rig/sshd.py), then alternates
four paths round by round so all see the same machine load:

- slurm-1x2: ``kind: slurm``, nodes 1, tasks_per_node 2 (local login host: unpack + sbatch, Slurm
  schedules, srun starts the tasks, each builds TF_CONFIG and starts the harness);
- ssh-2: the same two workers on the two SSH hosts, one each;
- slurm-2x2: nodes 2, tasks_per_node 2 (ranks on different nodes dial each other by name);
- ssh-4: four workers on the two SSH hosts, two each.

Preflight is skipped on the SSH path (Slurm has none): the figure is launch to the chief's first
metrics row (step 1: log_every=1), which needs TensorFlow imported and MultiWorkerMirroredStrategy
connected on every worker. Each run is stopped once its first row is there. The machine's load
average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.runs import launcher  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.config.slurm_spec import slurm_from_dict  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from backend.hosts.ssh import SSHOptions  # noqa: E402
from rig import slurm, slurm_nodes, sshd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {"epochs": 1, "steps_per_epoch": 100000, "log_every": 1, "checkpoint_every": 0}
TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def slurm_path(folder: Path, nodes: int):
    return lambda: (slurm_from_dict({
        "kind": "slurm", "host": "localhost", "transport": "local", "partition": slurm.PARTITION,
        "nodes": nodes, "tasks_per_node": 2, "time_limit": "10", "python": sys.executable,
        "workdir": str(folder / "slurm"), "tf_port": sshd.free_port(span=2)}), None)


def ssh_path(folder: Path, hosts, key: Path, options, workers: int):
    return lambda: (cluster_from_dict({"tasks": [
        {"role": "worker", "host": hosts[i % len(hosts)].address, "ssh_port": hosts[i % len(hosts)].port,
         "tf_port": sshd.free_port(), "identity_file": str(key), "python": sys.executable,
         "workdir": str(folder / "ssh")} for i in range(workers)]}), options)


def start_ssh_hosts(root: Path, count: int):
    key = root / "id_ed25519"
    sshd.keygen(key)
    (root / "authorized_keys").write_text((root / "id_ed25519.pub").read_text())
    hosts = [sshd.make_host(root, f"127.0.0.{n + 2}", root / "authorized_keys") for n in range(count)]
    (root / "known_hosts").write_text("".join(sshd.known_hosts_line(h) for h in hosts))
    options = SSHOptions(known_hosts=str(root / "known_hosts"), ssh_config=str(root / "none"),
                         allow_agent=False, look_for_keys=False)
    return hosts, key, options


def first_loss_s(cluster, options, job, store: RunStore) -> float:
    t0 = time.time()
    run = launcher.launch(cluster, job, store=store, options=options, preflight=launcher.Preflight.SKIP)
    metrics = Path(run.state.chief.remote_run_dir) / "metrics.jsonl"
    try:
        while not (metrics.exists() and metrics.read_text().strip()):
            if time.time() - t0 > 600:
                raise RuntimeError(f"no loss after 600 s: {run.status()}")
            time.sleep(0.05)
        return time.time() - t0
    finally:
        run.stop(grace_s=3)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    lacking = slurm_nodes.missing()
    if lacking:
        print(f"cannot start the test cluster, missing: {', '.join(lacking)} (run `make test` first)")
        return 1
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    folder = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    os.chmod(folder, 0o755)
    cluster_slurm = slurm_nodes.start(nodes=2, cpus=2)
    os.environ["SLURM_CONF"] = cluster_slurm.env["SLURM_CONF"]
    hosts, key, options = start_ssh_hosts(folder, 2)
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": PARAMS, "env": TF_ENV})
    store = RunStore(folder / "runs")
    paths = {"slurm-1x2": slurm_path(folder, 1), "ssh-2": ssh_path(folder, hosts, key, options, 2),
             "slurm-2x2": slurm_path(folder, 2), "ssh-4": ssh_path(folder, hosts, key, options, 4)}
    times: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for _ in range(a.rounds):
            for name, make in paths.items():
                times[name].append(first_loss_s(*make(), job, store))
                print(f"{name:<10} {times[name][-1]:6.2f} s  (load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        cluster_slurm.stop()
        for h in hosts:
            h.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print("\npath       median s  min s  max s   rounds: submit -> first loss point")
    for name, values in times.items():
        print(f"{name:<10} {statistics.median(values):8.2f} {min(values):6.2f} {max(values):6.2f}   "
              + " ".join(f"{v:.2f}" for v in values))
    for slurm_name, ssh_name in (("slurm-1x2", "ssh-2"), ("slurm-2x2", "ssh-4")):
        ratio = statistics.median(times[slurm_name]) / statistics.median(times[ssh_name])
        print(f"{slurm_name} / {ssh_name}: {ratio:.2f}x (target: within 1.2x)")
    print(json.dumps({k: [round(v, 2) for v in vs] for k, vs in times.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
