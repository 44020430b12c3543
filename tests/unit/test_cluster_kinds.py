"""The seam a cluster kind plugs into (issue 46, docs/slurm.md): a third kind, made up here, takes
its spec and reader (``config.kinds.register``) and its engine (``engines.register``), and then
launches, reports, reloads and stops through the same ``launcher``, ``Run`` and store as our hosts
and Slurm, with no other file touched. Its engine is a stand-in that records what it was asked
(no cluster needed: the point is the seam, not a scheduler)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from backend import engines
from backend.config import kinds
from backend.config.spec import ClusterSpec, JobKind, JobSpec, Role, TaskSpec, TransportKind
from backend.engines.base import Capabilities, Started, StopReport
from backend.hosts.pool import Pool
from backend.records.outcome import TaskPhase, TaskStatus
from backend.records.state import Phase
from backend.runs import launcher
from backend.runs.store import RunStore


@dataclass(frozen=True)
class Pair:
    """The made-up kind: two tasks on one machine, started by someone else."""
    host: str = "localhost"

    def as_cluster(self) -> ClusterSpec:
        return ClusterSpec(tuple(TaskSpec(role=role, host=self.host, tf_port=port, transport=TransportKind.LOCAL)
                                 for role, port in ((Role.CHIEF, 2300), (Role.WORKER, 2301))))


class PairEngine(Capabilities):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def begin(self, run, *, attempt: int, resume_step):
        self.asked.append(f"begin {attempt}")
        return {t.name: Started(pid=None, started=1.0) for t in run.state.tasks}

    def status(self, run):
        phase = TaskPhase.EXITED if "stop" in self.asked else TaskPhase.RUNNING
        return [TaskStatus(t.name, t.host, phase, exit_code=0 if "stop" in self.asked else None)
                for t in run.state.tasks]

    def stop(self, run, *, grace_s: float) -> StopReport:
        self.asked.append("stop")
        return StopReport()

    def log_tail(self, run, task: str, max_bytes: int) -> str:
        return ""

    def chief_transport(self, run):
        raise AssertionError("nothing here reaches the chief")


@pytest.fixture
def pair_kind(monkeypatch):
    engine = PairEngine()
    monkeypatch.setitem(kinds.KINDS, "pair", kinds.Kind("pair", Pair, lambda d: Pair(d["host"]),
                                                        lambda s: {"kind": "pair", "host": s.host}))
    monkeypatch.setitem(engines.ENGINES, Pair, engines.EngineKind(Pair, lambda pool, spec: engine,
                                                                  lambda spec, job, pool, preflight: []))
    return engine


def test_a_third_kind_launches_reloads_and_stops_through_the_same_run(tmp_path, pair_kind):
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(Pair(), JobSpec(kind=JobKind.COMMAND, command=("python", "fit.py")), store=store)
    assert pair_kind.asked == ["begin 1"] and run.engine is pair_kind
    assert run.state.cluster == {"kind": "pair", "host": "localhost"}
    assert [t.name for t in run.state.tasks] == ["chief-0", "worker-0"]
    reloaded = launcher.attach(run.run_id, store=store)   # a new reader: the kind from the record
    assert reloaded.engine is pair_kind and reloaded.cluster == Pair().as_cluster()
    assert kinds.load_any_cluster(_written(tmp_path)) == Pair("node7")
    reloaded.stop()
    assert pair_kind.asked == ["begin 1", "stop"]
    assert store.load(run.run_id).phase == Phase.STOPPED


def _written(tmp_path):
    path = tmp_path / "pair.yaml"
    path.write_text("kind: pair\nhost: node7\n")
    return path
