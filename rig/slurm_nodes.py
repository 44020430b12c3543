"""A real multi-node Slurm cluster on this one machine (DESIGN.md, "Scaling out: Slurm").

Each node is a holder process made with ``unshare --net --uts --mount`` (its own network,
hostname and mounts), joined by a veth pair to a bridge in the root namespace, which holds
slurmctld's address. Inside a node: ``hostname nodeN``, a bind-mounted copy of ``/etc/hosts``
naming every node (TensorFlow and the tasks resolve peers by name), ``lo`` up and the node's
address; ``slurmd -D`` is started in it with ``nsenter`` and finds its NodeName from the hostname.
The nodes share the filesystem (the run folder, the munge socket, slurm.conf), as a real
cluster's home directories do. One munged and one slurmctld serve them all, in the root namespace.

Addresses come from 10.213.0.0/16, a private range used only inside namespaces these tests
make: each cluster takes a /24 that no interface of this machine holds, and its traffic goes
only between the node namespaces and the bridge (no route out, no forwarding). ``stop()`` tears
down in order: scancel, ``scontrol shutdown``, the leftover slurmstepd of this cluster, munged,
the holders (their namespaces and veth ends go with them), then the bridge.

Needs root, util-linux (unshare, nsenter, mount) and iproute2 (ip).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rig import slurm
from rig.netns import TOOLS

PREFIX = "10.213"


def missing() -> list[str]:
    """What a multi-node cluster needs beyond a one-node one: namespaces, a bridge, veth pairs."""
    out = slurm.missing() + [t for t in (*TOOLS, "mount", "hostname") if not shutil.which(t)]
    if not out and subprocess.run(["unshare", "--net", "--uts", "--mount", "true"],
                                  capture_output=True).returncode != 0:
        out.append("network/UTS/mount namespaces (unshare failed)")
    return out


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


def _free_subnet() -> int:
    """A /24 of 10.213.0.0/16 that no interface here holds (several test clusters may coexist)."""
    held = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    start = os.getpid() % 250
    for k in [(start + i) % 250 + 1 for i in range(250)]:
        if f" {PREFIX}.{k}." not in held:
            return k
    raise RuntimeError(f"every /24 of {PREFIX}.0.0/16 is taken on this machine")


class Node:
    """One node's namespaces, held by a sleeping process; ``argv`` runs a command inside them."""

    def __init__(self, name: str, address: str, bridge: str, veth: str, hosts_file: Path) -> None:
        self.name, self.address, self.veth = name, address, veth
        self.holder = subprocess.Popen(["unshare", "--net", "--uts", "--mount", "--", "sleep", "infinity"])
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.time() + 10
        while self._ns() in (None, mine):   # unshare has not switched yet
            if time.time() > deadline or self.holder.poll() is not None:
                raise RuntimeError(f"could not create the namespaces of {name}")
            time.sleep(0.02)
        # The root end joins the bridge; the node's end is its eth0.
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(self.holder.pid))
        _ip("link", "set", veth, "master", bridge, "up")
        for argv in (["hostname", name], ["mount", "--bind", str(hosts_file), "/etc/hosts"],
                     ["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", f"{address}/24", "dev", "eth0"],
                     ["ip", "link", "set", "eth0", "up"]):
            subprocess.run(self.argv(argv), check=True, capture_output=True, timeout=30)

    def _ns(self) -> str | None:
        try:
            return os.readlink(f"/proc/{self.holder.pid}/ns/net")
        except OSError:
            return None

    def argv(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "--net", "--uts", "--mount", "--", *argv]

    def close(self) -> None:
        """End the holder: the namespaces, the mount and both veth ends go with it."""
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=10)
        # The kernel dismantles a namespace in the background: wait for the veth end to go, and
        # delete it ourselves if it lingers, so that nothing of the cluster is left behind.
        deadline = time.time() + 10
        while _link_exists(self.veth) and time.time() < deadline:
            time.sleep(0.05)
        _delete_link(self.veth)


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, timeout=30).returncode == 0


def _delete_link(name: str) -> None:
    subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30)


def start(*, nodes: int = 2, cpus: int = 2) -> slurm.SlurmCluster:
    """slurmctld and munged here, one slurmd per node namespace; wait until every node is idle."""
    folder = Path(tempfile.mkdtemp(prefix="tfconsole-slurm-nodes-"))
    k = _free_subnet()
    bridge, gateway = f"tfcb{k}", f"{PREFIX}.{k}.1"
    names = [f"node{i}" for i in range(1, nodes + 1)]
    addresses = {name: f"{PREFIX}.{k}.{10 + i}" for i, name in enumerate(names, 1)}
    ctld = slurm.node_name()
    teardown, spaces = [], []
    cluster = None
    try:
        _ip("link", "add", bridge, "type", "bridge")
        teardown.append(lambda: _delete_link(bridge))
        _ip("addr", "add", f"{gateway}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        hosts = folder / "hosts"
        hosts.write_text("127.0.0.1 localhost\n" + f"{gateway} {ctld}\n"
                         + "".join(f"{a} {n}\n" for n, a in addresses.items()))
        os.chmod(hosts, 0o644)
        for i, name in enumerate(names, 1):
            spaces.append(Node(name, addresses[name], bridge, f"tfcv{k}n{i}", hosts))
        env = slurm.prepare(folder, slurm.cluster_conf(folder, ctld=(ctld, gateway), nodes=list(addresses.items()),
                                                       cpus=cpus))
        procs = [slurm.daemon(folder, env, [slurm.DAEMONS[1]], "slurmctld.out")]
        procs += [slurm.daemon(folder, env, space.argv([slurm.DAEMONS[2]]), f"slurmd-{space.name}.out")
                  for space in spaces]
        # Holders end after munged; the bridge last (its ports are gone with the veth ends).
        cluster = slurm.SlurmCluster(folder, names[0], cpus, env, procs, tuple(names), addresses,
                                     [*(space.close for space in spaces), *teardown])
        cluster.wait_idle()
    except BaseException:
        if cluster is not None:
            cluster.stop()
        else:
            for step in [*(space.close for space in spaces), *teardown]:
                step()
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return cluster
