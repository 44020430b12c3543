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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rig.sshd import free_port

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


# Slurm's hold on a requeued job is this plus 1 s (see cluster_conf).
CRED_EXPIRE_S = 30


def slurm_conf(folder: Path, node: str, cpus: int) -> str:
    """One node: this machine, named after its short hostname, on 127.0.0.1."""
    return cluster_conf(folder, ctld=(node, "127.0.0.1"), nodes=[(node, "127.0.0.1")], cpus=cpus)


def cluster_conf(folder: Path, *, ctld: tuple[str, str], nodes: list[tuple[str, str]], cpus: int) -> str:
    """slurm.conf for slurmctld on ``ctld`` (name, address) and one slurmd per ``nodes`` entry.

    Per-node files carry ``%n`` (the node's name): several slurmd share this folder.
    """
    ctld_port, slurmd_port = free_port(), free_port()
    names = ",".join(name for name, _ in nodes)
    return "\n".join([
        f"ClusterName=tfc{os.getpid()}",
        f"SlurmctldHost={ctld[0]}({ctld[1]})",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
        "SlurmUser=root", "SlurmdUser=root",
        # cred_expire: a job step credential's lifetime, which is also how long Slurm holds a
        # requeued job before it may start again (slurm.conf(5), AuthInfo: "This also controls how
        # long a requeued job must wait"; 120 s by default, the hold 121 s). Slurm's own hold, set
        # through Slurm's own option, shorter; still far past KillWait (5 s here), whose kill of
        # the old tasks it keeps a re-run clear of (test_slurm_node_failure.py waited on it).
        "AuthType=auth/munge", f"AuthInfo=socket={folder}/sock/munge.socket,cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool/%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd-%n.log",
        # No cgroups here (no systemd): process groups track a step's processes.
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        # No accounting daemon: state comes from squeue/scontrol, as on many small clusters.
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none", "MpiDefault=none", "ReturnToService=2",
        # A finished job stays visible to `scontrol show job` for 10 minutes; TERM -> KILL in 5 s.
        "MinJobAge=600", "KillWait=5", "InactiveLimit=0", "OverTimeLimit=0",
        # A pending job that becomes eligible by the clock (a requeued job's hold ending) starts at
        # the next pass of a scheduling loop: every 60 s (main) and 30 s (backfill) by default,
        # every 5 s here. The same decisions, taken sooner.
        "SchedulerParameters=sched_interval=5,bf_interval=5",
        *[f"NodeName={name} NodeAddr={address} CPUs={cpus} State=UNKNOWN" for name, address in nodes],
        f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP",
        ""])


@dataclass
class SlurmCluster:
    folder: Path
    node: str                 # the first node (the only one, on a one-node cluster)
    cpus: int                 # per node
    env: dict[str, str]
    procs: list[subprocess.Popen]
    nodes: tuple[str, ...] = ()
    addresses: dict[str, str] = field(default_factory=dict)   # node -> its address (multi-node)
    # What stop() ends after munged, in order (a multi-node cluster's namespaces, then its bridge).
    teardown: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = self.nodes or (self.node,)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=check,
                              timeout=60)

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if " " in line)

    def node_state(self) -> str:
        """One word when every node says the same (``idle``), else ``node1=idle node2=mixed``."""
        states = self.node_states()
        if set(states) == set(self.nodes) and len(set(states.values())) == 1:
            return next(iter(states.values()))
        return " ".join(f"{n}={s}" for n, s in sorted(states.items()))

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.node_state() == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm nodes are {self.node_state()!r}, not idle, after {timeout:.0f} s; "
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
        for path in [self.folder / "slurmctld.log", *sorted(self.folder.glob("slurmd*.log")),
                     self.folder / "munge" / "munged.log"]:
            if path.exists():
                parts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, end any step daemon of ours still waiting, munged,
        then ``teardown`` (namespaces, bridge).

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
        for step in self.teardown:
            step()
        shutil.rmtree(self.folder, ignore_errors=True)


def prepare(folder: Path, conf_text: str) -> dict[str, str]:
    """State, spool and munge folders, the key, slurm.conf and a running munged; the clients' env.

    The folder must be readable by all: munged (as the munge user) must reach its own sub-folder,
    which a pytest temporary folder (mode 0700) would not allow.
    """
    os.chmod(folder, 0o755)
    (folder / "state").mkdir()
    (folder / "spool").mkdir()
    munge = folder / "munge"
    munge.mkdir(mode=0o700)
    shutil.copyfile("/etc/munge/munge.key", munge / "munge.key")
    os.chmod(munge / "munge.key", 0o400)
    shutil.chown(munge, "munge", "munge")
    shutil.chown(munge / "munge.key", "munge", "munge")
    conf = folder / "slurm.conf"
    conf.write_text(conf_text)
    # munged as the munge user (it refuses root); its socket folder must be writable by it. One
    # munged serves every node: its socket is a file on the filesystem they share.
    (folder / "sock").mkdir()
    shutil.chown(folder / "sock", "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", DAEMONS[0],
                    f"--socket={folder}/sock/munge.socket", f"--key-file={munge}/munge.key",
                    f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                    f"--seed-file={munge}/munged.seed"], check=True, timeout=30)
    (folder / "munged.pid").symlink_to(munge / "munged.pid")
    return {**os.environ, "SLURM_CONF": str(conf)}


def daemon(folder: Path, env: dict, argv: list[str], log_name: str) -> subprocess.Popen:
    """A Slurm daemon in the foreground (-D), a child of this process in its own session."""
    with open(folder / log_name, "w") as log:
        return subprocess.Popen([*argv, "-D", "-f", env["SLURM_CONF"]], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def start(*, cpus: int = 2) -> SlurmCluster:
    """munged, slurmctld and slurmd, foreground children of this process; wait for an idle node."""
    folder = Path(tempfile.mkdtemp(prefix="tfconsole-slurm-"))
    node = node_name()
    env = prepare(folder, slurm_conf(folder, node, cpus))
    procs = [daemon(folder, env, [d], f"{Path(d).name}.out") for d in DAEMONS[1:]]
    cluster = SlurmCluster(folder, node, cpus, env, procs)
    try:
        cluster.wait_idle()
    except BaseException:
        cluster.stop()
        raise
    return cluster
