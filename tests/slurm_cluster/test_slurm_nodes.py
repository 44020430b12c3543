"""The multi-node test cluster itself (rig/slurm_nodes.py): two nodes, each its own network
namespace and address, whose tasks find each other by name; stopped, it leaves nothing behind."""
from __future__ import annotations

import subprocess

from rig import slurm_nodes
from tests.conftest import require

# Each task listens on its node's address, then dials the other task's node by name.
DIAL = r"""
import os, socket, sys, time
me, other = os.environ["SLURMD_NODENAME"], {"node1": "node2", "node2": "node1"}[os.environ["SLURMD_NODENAME"]]
server = socket.create_server(("", int(sys.argv[1])))
time.sleep(1)
with socket.create_connection((other, int(sys.argv[1])), timeout=10) as s:
    s.sendall(me.encode())
conn, (address, _) = server.accept()
print(f"{me} heard {conn.recv(64).decode()} from {address}", flush=True)
"""


def links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_two_nodes_each_in_its_own_namespace_reach_each_other_by_name(tmp_path):
    lacking = slurm_nodes.missing()
    require("a multi-node Slurm cluster (" + ", ".join(lacking) + ")", not lacking)
    cluster = slurm_nodes.start(nodes=2, cpus=2)
    try:
        assert cluster.node_states() == {"node1": "idle", "node2": "idle"}, cluster.logs()
        script = tmp_path / "dial.py"   # the nodes share the filesystem
        script.write_text(DIAL)
        out = cluster.run("srun", "-N2", "--ntasks-per-node=1", "bash", "-c",
                          f"echo $(hostname) $SLURM_STEP_NODELIST $SLURM_STEP_TASKS_PER_NODE; "
                          f"python3 {script} 24567", check=False)
        assert out.returncode == 0, (out.stderr, cluster.logs())
        lines = sorted(out.stdout.splitlines())
        assert "node1 node[1-2] 1(x2)" in lines and "node2 node[1-2] 1(x2)" in lines, lines
        a1, a2 = cluster.addresses["node1"], cluster.addresses["node2"]
        assert f"node1 heard node2 from {a2}" in lines and f"node2 heard node1 from {a1}" in lines, lines
        assert a1.startswith("10.213.") and a1 not in subprocess.run(["ip", "-o", "addr"], capture_output=True,
                                                                      text=True).stdout
        folder, conf = cluster.folder, cluster.env["SLURM_CONF"]
    finally:
        cluster.stop()
    # Nothing left: no daemon or step of this cluster, no bridge, no veth, no folder.
    assert cluster.step_daemons() == []
    assert not [p for p in cluster.procs if p.poll() is None]
    k = a1.split(".")[2]   # this cluster's /24 names its bridge and veth ends
    assert f"tfcb{k}:" not in links() and f"tfcv{k}n" not in links(), links()
    assert not folder.exists()
    left = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    assert not [ln for ln in left.splitlines() if conf in ln and not ln.startswith("Z")], left
