"""Where this process stands in a console run, read from the environment the launcher sets
(the names: harness/taskenv.py).

Outside a run (no TFCONSOLE_RUN_DIR) every field says so and the library does nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .harness import taskenv, tf_config_doc


@dataclass(frozen=True)
class Context:
    run_dir: str | None      # this task's run folder on its host; None outside a run
    run_id: str | None
    attempt: int
    task: str                # "chief-0", "worker-1", ...; "worker-0" outside a run
    tasks: tuple             # every task's name, chief first (from TF_CONFIG: tf_config_doc.place)
    is_chief: bool
    resume_step: int | None  # the checkpoint step this attempt must start from
    # The run shrank (cluster min_workers, job restart.shrink): "keep_global_batch" or
    # "keep_replica_batch", else None; a script multiplies its learning rate by lr_scale and
    # uses global_batch_size when set (docs/job-contract.md, "A run that shrank").
    shrink: str | None = None
    lr_scale: float = 1.0
    replicas: int | None = None          # replicas this attempt runs on, after a shrink
    launch_replicas: int | None = None   # replicas the run was launched with
    global_batch_size: int | None = None

    @property
    def in_run(self) -> bool:
        return self.run_dir is not None

    @property
    def task_index(self) -> int:
        return self.tasks.index(self.task) if self.task in self.tasks else 0


def from_env(environ=None) -> Context:
    env = os.environ if environ is None else environ
    where = tf_config_doc.place(env.get("TF_CONFIG"))
    names = taskenv
    run_dir = env.get(names.RUN_DIR) or None
    flag = env.get(names.IS_CHIEF)
    resume = (env.get(names.RESUME_STEP) or "").strip()
    return Context(
        run_dir=os.path.abspath(run_dir) if run_dir else None,
        run_id=env.get(names.RUN_ID) or None,
        attempt=int(env.get(names.ATTEMPT) or 0),
        task=env.get(names.TASK) or where.task,
        tasks=where.tasks,
        is_chief=where.is_chief if flag in (None, "") else flag == "1",
        resume_step=int(resume) if resume else None,
        shrink=env.get(names.SHRINK) or None,
        lr_scale=float(env.get(names.LR_SCALE) or 1.0),
        replicas=_number(env.get(names.REPLICAS)),
        launch_replicas=_number(env.get(names.LAUNCH_REPLICAS)),
        global_batch_size=_number(env.get(names.GLOBAL_BATCH_SIZE)))


def _number(text: str | None) -> int | None:
    return int(text) if (text or "").strip() else None
