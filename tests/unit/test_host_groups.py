"""backend.hosts.tasks: a run's tasks grouped by host connection and run folder, the one place
engines, stacks, health, log copies and the run handle find a task's host."""
from __future__ import annotations

from backend.config.spec import cluster_from_dict
from backend.hosts.pool import Pool
from backend.hosts.tasks import by_host, place, task_host
from backend.records.state import TaskState


def test_tasks_sharing_a_connection_and_run_folder_form_one_group():
    cluster = cluster_from_dict({"tasks": [
        {"role": "chief", "host": "n1", "tf_port": 2222},
        {"role": "worker", "host": "n1", "tf_port": 2223},
        {"role": "worker", "host": "n1", "tf_port": 2224, "ssh_port": 2200},   # another connection
        {"role": "worker", "host": "n2", "tf_port": 2222}]})
    tasks = [TaskState("chief-0", 0, "n1", "tfconsole/runs/r"), TaskState("worker-0", 1, "n1", "tfconsole/runs/r"),
             TaskState("worker-1", 2, "n1", "tfconsole/runs/r"), TaskState("worker-2", 3, "n2", "other/runs/r")]
    groups = by_host(tasks, cluster)
    assert [(g.name, g.names, g.spec.host, g.run_dir) for g in groups] == [
        ("chief-0", ["chief-0", "worker-0"], "n1", "tfconsole/runs/r"),
        ("worker-1", ["worker-1"], "n1", "tfconsole/runs/r"),
        ("worker-2", ["worker-2"], "n2", "other/runs/r")]
    assert place(tasks[0], cluster) == place(tasks[1], cluster) != place(tasks[2], cluster)
    pool = Pool()
    host = task_host(pool, cluster, tasks[3])
    assert (host.run_dir, host.python) == ("other/runs/r", cluster.tasks[3].python)
    assert groups[0].host(pool).transport is task_host(pool, cluster, tasks[1]).transport   # one connection
