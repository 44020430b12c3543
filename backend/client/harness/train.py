"""The worker harness: ``python RUN/lib train --run-dir RUN --job JOB.py --run-id ID``.

Runs on every host of a MultiWorkerMirroredStrategy job (TF_CONFIG from the environment). Every
``log_every`` steps (and at every checkpoint step) all workers meet in one all_gather that carries
each worker's local loss, step time, examples/s and the chief's save-now flag; the chief writes
metrics.jsonl and TensorBoard from it. Exit 0 on success; on failure the last line starts with
``HARNESS FAILED``. SIGTERM or SIGUSR2 (a preemption's warning): every worker saves the same step,
then exits ``preempt.EXIT_CODE`` (75), the last line ``HARNESS PREEMPTED: saved at step N``.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback


from . import jobs, layout, preempt, stackdump, taskenv, tfload   # standard library only


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--job", required=True, help="job module file, see docs/job-contract.md")
    p.add_argument("--run-id", required=True)
    p.add_argument("--attempt", type=int, default=0)
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--resume-step", type=int, default=None)
    resume.add_argument("--resume-latest", action="store_true")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    return p.parse_args(argv)


def _say_ready(run_dir: str) -> None:
    """Past the imports: the start check (spawn.start_many) stops waiting for this task."""
    task = os.environ.get(taskenv.TASK)
    if task:
        with open(os.path.join(run_dir, layout.TASKS, f"{task}.ready"), "w"):
            pass


def main(argv=None) -> int:
    args = parse_args(argv)
    task = "?"
    # From the start: a signal during start-up is kept and saved at the first step.
    preempt.WATCH.configure(task=os.environ.get(taskenv.TASK) or "worker-0",
                            run=os.path.abspath(args.run_dir), attempt=args.attempt,
                            grace_s=preempt.DEFAULT_GRACE_S)
    preempt.WATCH.install()
    # First thing: a worker hung anywhere (even in cluster start-up) can show its stack.
    stackdump.install(args.run_dir, os.environ.get(taskenv.TASK) or "worker-0")
    try:
        tfload.load()   # TensorFlow loads here, before the job's own `import keras` would
        job = jobs.load_job(args.job)
        params = jobs.settle_params(job, args.param)
        _say_ready(args.run_dir)
        from . import loop
        cluster = loop.cluster_from_env()
        task = cluster.task
        preempt.WATCH.configure(task=task, run=os.path.abspath(args.run_dir), attempt=args.attempt,
                                grace_s=float(params["preempt_grace_s"]))
        print(f"[{task}] harness start run={args.run_id} attempt={args.attempt} "
              f"params={params}", flush=True)
        from . import session
        summary = session.Session(args, job, params, cluster).run()
        if summary.get("preempted") is not None:
            rec = preempt.WATCH.saved_record
            print(f"[{task}] HARNESS PREEMPTED: saved at step {summary['preempted']} "
                  f"({rec['seconds']:.1f} s after the signal, grace {rec['grace_s']:g} s) {summary}",
                  flush=True)
            code = preempt.EXIT_CODE
        else:
            print(f"[{task}] HARNESS DONE {summary}", flush=True)
            code = 0
    except BaseException as exc:  # noqa: BLE001 - the last line must always say why
        traceback.print_exc()
        sys.stderr.flush()
        print(f"[{task}] HARNESS FAILED: {_explain(exc)}", flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: after a peer died, TensorFlow's collective teardown can hang or abort at exit.
    os._exit(code)


def _explain(exc: BaseException) -> str:
    name = type(exc).__name__
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # TensorFlow's first line is often just "Graph execution error:"; prefer the cause.
    cause = next((ln for ln in lines if "aborted" in ln or "timed out" in ln.lower()), None)
    first = cause or next((ln for ln in lines if ln != "Graph execution error:"), "")
    if "Collective ops is aborted" in str(exc) or name in ("UnavailableError",
                                                            "DeadlineExceededError"):
        return (f"{name}: a peer worker died or is unreachable (collective aborted or timed "
                f"out); see the other workers' logs. {first}")
    return f"{name}: {first}"


if __name__ == "__main__":
    main()
