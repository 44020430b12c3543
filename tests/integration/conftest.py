"""Clusters for integration tests: two tasks on the real sshd hosts, or two local tasks."""
from __future__ import annotations

import pytest

from backend.spec import cluster_from_dict
from tests import sshd


def ssh_task(host, role, port, client_key, python, workdir, **extra) -> dict:
    return {"role": role, "host": host.address, "ssh_port": host.port, "tf_port": port,
            "identity_file": str(client_key), "python": python, "workdir": str(workdir), **extra}


@pytest.fixture
def ssh_cluster(ssh_hosts, client_key, python_path, tmp_path):
    return cluster_from_dict({"tasks": [
        ssh_task(ssh_hosts[0], "chief", sshd.free_port(), client_key, python_path, tmp_path / "h2"),
        ssh_task(ssh_hosts[1], "worker", sshd.free_port(), client_key, python_path, tmp_path / "h3"),
    ]})


@pytest.fixture
def local_cluster(python_path, tmp_path):
    return cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
         "python": python_path, "workdir": str(tmp_path / "local")}
        for _ in range(2)]})
