"""Spare hosts (issue 39): the cluster file's ``spares:``, and the pure plan that moves a lost
host's tasks onto them."""
from __future__ import annotations

import pytest

from backend.checkpoints import newest_anywhere
from backend.config.spec import Role, cluster_from_dict, cluster_to_dict
from backend.config.tfconfig import check_cluster
from backend.errors import SpecErrors
from backend.runs.membership import plan

TASKS = [{"role": "chief", "host": "h1", "tf_port": 2000}, {"role": "worker", "host": "h2", "tf_port": 2000},
         {"role": "worker", "host": "h3", "tf_port": 2000}]
NAMES = ["chief-0", "worker-0", "worker-1"]


def test_spares_are_read_checked_like_tasks_and_written_back():
    cluster = cluster_from_dict({"tasks": TASKS, "spares": [{"host": "h9", "tf_port": 2001, "workdir": "w"}]})
    assert cluster.spares[0].host == "h9" and cluster.spares[0].role is Role.WORKER
    assert cluster_to_dict(cluster)["spares"] == [{"host": "h9", "tf_port": 2001, "workdir": "w"}]
    assert "spares" not in cluster_to_dict(cluster_from_dict({"tasks": TASKS}))
    with pytest.raises(SpecErrors) as err:
        cluster_from_dict({"tasks": TASKS, "spares": [{"host": "h9", "tf_port": 80}, {"tf_port": 2001}]})
    assert "spares[0].tf_port" in str(err.value) and "spares[1].host" in str(err.value)


def test_a_spare_on_a_tasks_own_host_is_flagged():
    cluster = cluster_from_dict({"tasks": TASKS, "spares": [{"host": "h2", "tf_port": 2001}]})
    assert any(f.field == "spares[0].host" and "losing that host" in f.message for f in check_cluster(cluster))


def test_the_plan_moves_each_lost_task_to_the_next_spare_chief_included():
    saved = {"tasks": TASKS, "spares": [{"host": "s1", "tf_port": 3000}, {"host": "s2", "tf_port": 3000},
                                        {"host": "s3", "tf_port": 3000}]}
    found = plan(saved, NAMES, {"h1", "h3"}, refused={0})
    assert [(m.task, m.old, m.new) for m in found.moves] == [("chief-0", "h1", "s2"), ("worker-1", "h3", "s3")]
    assert found.tasks[0] == {"host": "s2", "tf_port": 3000, "role": "chief"} and found.tasks[1] == TASKS[1]
    assert found.spares == [{"host": "s1", "tf_port": 3000}] and not found.missing


def test_with_no_spare_left_the_plan_names_the_task():
    found = plan({"tasks": TASKS}, NAMES, {"h3"})
    assert found.missing == ["worker-1"] and not found.moves


def test_the_newest_step_anywhere_and_where_to_copy_it_from():
    step, sources = newest_anywhere({"chief-0": [{"step": 40}], "worker-0": [{"step": 40}, {"step": 80}],
                                     "worker-1": []})
    assert step == 80 and sources == {"chief-0": "worker-0", "worker-1": "worker-0"}
    assert newest_anywhere({"chief-0": [], "worker-0": []}) == (None, {})


def test_with_min_workers_the_plan_shrinks_and_a_worker_becomes_chief():
    found = plan({"tasks": TASKS, "min_workers": 2}, NAMES, {"h1"})
    assert found.dropped == ["chief-0"] and not found.missing
    assert [t["role"] for t in found.tasks] == ["chief", "worker"] and found.tasks[0]["host"] == "h2"
    assert plan({"tasks": TASKS, "min_workers": 3}, NAMES, {"h3"}).missing == ["worker-1"]
    cluster = cluster_from_dict({"tasks": TASKS, "min_workers": 2})
    assert cluster.min_workers == 2 and cluster_to_dict(cluster)["min_workers"] == 2
    assert any(f.field == "min_workers" for f in check_cluster(cluster_from_dict({"tasks": TASKS, "min_workers": 3})))
