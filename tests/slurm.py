"""A real one-node Slurm cluster for the tests, without systemd (docs/slurm.md, "Test cluster").

Debian's ``munged``, ``slurmctld`` and ``slurmd`` started directly: munged as the munge user on a
private socket, a generated ``slurm.conf`` in a temporary folder (free ports, private state and
spool folders), so the cluster leaves nothing in /etc and never meets a system-wide one. Clients
find it through ``SLURM_CONF``. ``stop()`` runs ``scontrol shutdown`` and then checks that the
daemons are gone.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.sshd import free_port

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")
PARTITION = "debug"


def missing() -> list[str]:
    """What a one-node cluster needs and this machine lacks (root included: slurmd runs jobs)."""
    out = [d for d in DAEMONS if not os.path.exists(d)]
    out += [c for c in CLIENTS if not shutil.which(c)]
    if os.geteuid() != 0:
        out.append("root (slurmd and munged's user switch)")
    return out


def node_name() -> str:
    """slurmd refuses to start unless its NodeName is this machine's short hostname."""
    return socket.gethostname().split(".")[0]


def slurm_conf(folder: Path, node: str, cpus: int) -> str:
    ctld_port, slurmd_port = free_port(), free_port()
    return "\n".join([
        f"ClusterName=tfc{os.getpid()}",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={folder}/sock/munge.socket",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
        # No cgroups here (no systemd): process groups track a step's processes.
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        # No accounting daemon: state comes from squeue/scontrol, as on many small clusters.
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none", "MpiDefault=none", "ReturnToService=2",
        # A finished job stays visible to `scontrol show job` for 10 minutes; TERM -> KILL in 5 s.
        "MinJobAge=600", "KillWait=5", "InactiveLimit=0", "OverTimeLimit=0",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        ""])


@dataclass
class SlurmCluster:
    folder: Path
    node: str
    cpus: int
    env: dict[str, str]
    procs: list[subprocess.Popen]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=check,
                              timeout=60)

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return out.stdout.strip()

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.node_state() == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm node is {self.node_state()!r}, not idle, after {timeout:.0f} s; "
                           f"logs in {self.folder}: {self.logs()}")

    def cancel_all(self, timeout: float = 60) -> None:
        self.run("scancel", f"--user={os.geteuid()}", check=False)
        deadline = time.time() + timeout
        while time.time() < deadline and self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
            time.sleep(0.5)

    def step_daemons(self) -> list[int]:
        """Live slurmstepd processes of this cluster (their environment names our slurm.conf)."""
        mine = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if not f.read().startswith(b"slurmstepd"):
                        continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mine in f.read().split(b"\0"):
                        pids.append(int(entry))
            except (OSError, ValueError):
                continue
        return pids

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.folder / name
            if path.exists():
                parts.append(f"--- {name}\n" + path.read_text()[-2000:])
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, and end any step daemon of ours still waiting.

        A slurmstepd outlives ``scontrol shutdown`` while it waits to report a job's end; left
        alone it retries for a long time and then signals its job's old process group, whose
        number may by then belong to another process.
        """
        self.cancel_all()
        self.run("scontrol", "shutdown", check=False)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in self.step_daemons():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        munge_pid = self.folder / "munged.pid"
        if munge_pid.exists():
            try:
                os.kill(int(munge_pid.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


def start(*, cpus: int = 2) -> SlurmCluster:
    """munged, slurmctld and slurmd, foreground children of this process; wait for an idle node.

    The folder is a fresh one under /tmp, readable by all: munged (as the munge user) must reach
    its own sub-folder, which a pytest temporary folder (mode 0700) would not allow.
    """
    folder = Path(tempfile.mkdtemp(prefix="tfconsole-slurm-"))
    os.chmod(folder, 0o755)
    node = node_name()
    (folder / "state").mkdir()
    (folder / "spool").mkdir()
    munge = folder / "munge"
    munge.mkdir(mode=0o700)
    shutil.copyfile("/etc/munge/munge.key", munge / "munge.key")
    os.chmod(munge / "munge.key", 0o400)
    shutil.chown(munge, "munge", "munge")
    shutil.chown(munge / "munge.key", "munge", "munge")
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, node, cpus))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs = []
    # munged as the munge user (it refuses root); its socket folder must be writable by it.
    (folder / "sock").mkdir()
    shutil.chown(folder / "sock", "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", DAEMONS[0],
                    f"--socket={folder}/sock/munge.socket", f"--key-file={munge}/munge.key",
                    f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                    f"--seed-file={munge}/munged.seed"], check=True, timeout=30)
    (folder / "munged.pid").symlink_to(munge / "munged.pid")
    for daemon in DAEMONS[1:]:
        log = open(folder / f"{Path(daemon).name}.out", "w")
        procs.append(subprocess.Popen([daemon, "-D", "-f", str(conf)], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    cluster = SlurmCluster(folder, node, cpus, env, procs)
    try:
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster
