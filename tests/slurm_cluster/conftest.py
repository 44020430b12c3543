"""The multi-node Slurm cluster (rig/slurm_nodes.py) as a fixture."""
from __future__ import annotations

import os

import pytest

from tests.conftest import require


@pytest.fixture
def slurm_nodes():
    """Two Slurm nodes, each in its own network namespace, for one test; ``SLURM_CONF`` points
    every client at it while the test runs.

    Per test, not per session: it starts in about 1.5 s, and a session-wide one would fight the
    one-node cluster (``slurm_session``) over ``SLURM_CONF`` in a process that has both.
    """
    from rig import slurm_nodes as nodes
    lacking = nodes.missing()
    require("a multi-node Slurm cluster (" + ", ".join(lacking) + ")", not lacking)
    cluster = nodes.start(nodes=2, cpus=2)
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    try:
        yield cluster
    finally:
        cluster.stop()
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
