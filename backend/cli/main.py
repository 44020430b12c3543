"""Command line: ``python -m backend --help``. Exit 0 on success; otherwise one line saying why.

Why one file of this size: the parser of every command and the small commands' bodies: one file
whose ``--help`` tree a reader can see at once; commands with bodies of their own (sweep, audit,
checkpoints, goodput, profile, tensorboard) have their own files.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

# Only what every command needs is imported here: each command imports its own modules inside
# its function, so a read command answers at once (importing the whole backend
# took 1.1 s of every command, Optuna's alembic alone 0.9 s). tests/unit/test_cli_imports.py
# guards it.
from backend.cli.checkpoints import EXIT_CODES, _attach, _options, _store, add_commands, print_json, print_table
from backend.cli.safe_stream import SafeStream
from backend.cli.audit import audit_command
from backend.cli.metrics import add_command as metrics_command
from backend.cli.goodput import add_command as goodput_command
from backend.cli.profile import add_command as profile_command
from backend.cli.tensorboard import add_command as tensorboard_command
from backend.cli.sweep import add_command as sweep_command
from backend.errors import ConsoleError, DiskFullError, MultiHostError
from backend.access import identity


def cmd_tf_config(a) -> int:
    from backend.config import tfconfig
    from backend.config.spec import load_cluster
    from backend.hosts.resolve import tf_addresses, tf_hosts
    cluster = load_cluster(a.cluster)
    hosts = tf_hosts(cluster, a.ssh_config)
    tfconfig.require_valid(cluster, hosts=hosts)
    for f in tfconfig.check_cluster(cluster, hosts):
        print(f"{f.level}: {f.field}: {f.message}", file=sys.stderr)
    addresses = tf_addresses(cluster, a.ssh_config)
    for row in tfconfig.address_rows(cluster, addresses):   # stderr: stdout stays one JSON document
        print(f"{row['task']}: {row['host']} -> {row['address']}", file=sys.stderr)
    print(json.dumps(tfconfig.all_tf_configs(cluster, addresses), indent=2))
    return 0


def cmd_preflight(a) -> int:
    from backend.config.spec import load_cluster
    from backend.hosts.pool import Pool
    from backend.hosts.preflight import CHECKS, run_preflight
    cluster = load_cluster(a.cluster)
    with Pool(_options(a)) as pool:
        reports = run_preflight(cluster, pool)
    if a.json:
        print_json([{"task": r.task, "host": r.host, "ok": r.ok, "checks": r.checks} for r in reports])
    else:
        print_table([r.row() for r in reports], ["task", "host", *CHECKS])
    bad = [r for r in reports if not r.ok]
    if bad:
        print(f"preflight failed on {len(bad)} of {len(reports)} task(s)", file=sys.stderr)
    return 1 if bad else 0


def cmd_launch(a) -> int:
    from backend.config.kinds import load_any_cluster
    from backend.config.spec import load_job
    from backend.runs import launcher
    run = launcher.launch(load_any_cluster(a.cluster), load_job(a.job), store=_store(a),
                          options=_options(a), run_id=a.run_id)
    print(run.run_id)
    if a.wait:
        run.wait(timeout=a.wait)
        print(f"run {run.run_id}: {run.state.phase}")
        return 0 if run.state.phase == "finished" else 1
    return 0


def cmd_status(a) -> int:
    from backend.runs.detached import FAILURE_LOG, KEEPER_LOG, keeper_pid
    from backend.runs.membership import shrink_line
    from backend.runs.status_view import status_json
    from backend.files import room
    run = _attach(a)
    from backend.diagnosis import data_checks, health
    from backend.records import decision
    from backend.runs import resume
    full = room(run.local_dir)
    try:
        statuses = run.settle() or run.status()   # settle: a run whose tasks all ended is recorded so
        resume.refresh(run)   # a restart nobody checked yet: did every worker resume from its step?
    except DiskFullError as err:   # nothing can be recorded: the tasks are still read, and why said
        full, statuses = err, run.status()
    nan = health.status_line(run)
    same_data = data_checks.status_line(run)
    # A host that stopped answering (or whose key changed) comes first: the exits of its peers
    # that lost their collective with it are only the echo.
    host_first = decision.cause(statuses)
    if a.json:
        print_json({**status_json(run, statuses, health_line=nan), "same_data": same_data or None,
                    "disk_full": str(full) if full else None, "hosts": host_first or None})
        return 0
    print(f"run {run.run_id}: {run.shown_phase(statuses)}, attempt {run.state.attempt}")
    if full:
        print(f"  warning: {full}")
    if host_first:
        print(f"  warning: {host_first}")
    for s in statuses:
        print(f"  {s.name:<10} {s.host:<20} {s.label}" + (f"  -- {s.diagnosis}" if s.diagnosis else ""))
    for t in run.state.attempts:
        resumed = "scratch" if t.resume_step is None else f"step {t.resume_step}"
        print(f"  attempt {t.number}: from {resumed}, last step {t.last_step if t.last_step is not None else '-'}, "
              f"{'ended: ' + str(t.reason) if t.ended else 'running'}")
    if shrink_line(run.job):   # the run goes on with fewer tasks (min_workers, restart.shrink)
        print(f"  {shrink_line(run.job)}")
    for line in resume.warnings(run.state):
        print(f"  warning: {line}")
    if nan:
        print(f"  {nan}")
    if same_data:
        print(f"  warning: {same_data}")
    if run.state.unreachable:
        print(f"  not stopped yet on: {', '.join(run.state.unreachable)} - run `stop {run.run_id}` again "
              "when they answer")
    pid = keeper_pid(run.local_dir)
    if run.keeper_note:
        print(f"  {run.keeper_note}")
    elif pid:
        print(f"  keeper: pid {pid} (restarts on failure; log {run.local_dir / KEEPER_LOG})")
    failure = run.local_dir / FAILURE_LOG
    if run.state.phase == "failed" and failure.exists():
        print(f"last failure ({failure}):")
        print("\n".join(failure.read_text().splitlines()[-40:]))
    return 0


def cmd_keep(a) -> int:
    from dataclasses import asdict
    from backend.runs.keeper import Keeper
    from backend.runs.keeper_log import KeeperLog
    from backend.hosts.ssh import SSHOptions
    options = SSHOptions(**{**asdict(_options(a)), **json.loads(a.ssh_options or "{}")})
    # Everything the keeper prints goes to keeper.log, whole lines or none, and a full disk
    # never raises out of a print (main() puts the streams back).
    sys.stdout = sys.stderr = log = KeeperLog()
    phase = Keeper(a.run, store=_store(a), options=options, poll_s=a.poll,
                   log=log).run(take_over=a.take_over)
    print(f"run {a.run}: {phase}")
    return 0


def _follow(run, name: str) -> int:
    """Print the task's new lines until the stream ends or Ctrl-C.

    The SSH read runs in a daemon thread. Ctrl-C then lands in this loop, never inside
    paramiko's locks, where an interrupted wait could leave the stream unable to close and the
    command hanging after Ctrl-C. Exiting closes the connection, and with it the remote ``tail``.
    """
    import queue
    import threading
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        try:
            for line in run.follow(name):
                lines.put(line)
        except Exception as err:  # noqa: BLE001 - handed to the main thread, which reports it
            lines.put(err)
        lines.put(None)
    threading.Thread(target=pump, name="follow", daemon=True).start()
    while (item := lines.get()) is not None:
        if isinstance(item, Exception):
            raise item
        print(item, flush=True)
    return 0


def cmd_logs(a) -> int:
    # Reads the hosts (or the copies already here), writes nothing: a read-only runs folder serves.
    run = _attach(a, reads_only=True)
    names = [a.task] if a.task else [t.name for t in run.state.tasks]
    if a.follow:
        return _follow(run, names[0])
    for name in names:
        if len(names) > 1:
            print(f"==> {name} <==")
        print(run.log_tail(name, 200_000), end="")
    return 0


def cmd_stacks(a) -> int:
    run = _attach(a)
    found, folder = run.dump_stacks()
    for s in found:
        print(f"==> {s.task} on {s.host} <==")
        print(s.text.rstrip() if s.text else f"(no stacks: {s.error})")
    if folder:
        print(f"saved in {folder}")
    return 0 if any(s.text for s in found) else 1


def cmd_stop(a) -> int:
    run = _attach(a)
    if not run.reload().live:
        return _stop_leftovers(run, a.grace)
    report = run.stop(grace_s=a.grace, save=a.save, save_grace_s=a.save_grace)
    if a.save:
        print(f"saved step {run.saved_step} on every worker: restore {run.run_id} --step {run.saved_step}"
              if run.saved_step is not None else
              f"no step saved within {a.save_grace:g} s: the newest earlier checkpoint stays usable")
    killed = f" (killed after {a.grace:g} s: {', '.join(report.killed)})" if report.killed else ""
    print(f"stopped {run.run_id}: no process left on any host{killed}")
    return 0


def _stop_leftovers(run, grace_s: float) -> int:
    """A run that has ended can still have left processes (a child of a killed main process, a
    daemon): look on every host and stop them, leaving the run's record as it is."""
    report = run.engine.stop(run, grace_s=grace_s)
    if not report.clean:
        raise MultiHostError("stop", report.errors,
                             "Run stop again when those hosts answer; the run's record is unchanged.")
    what = f"stopped what it left running ({', '.join(report.found)}); " if report.found else ""
    print(f"run {run.run_id} is already {run.state.phase}: {what}no process left on any host")
    return 0


def cmd_attach_slurm(a) -> int:
    from backend.engines.slurm import adopt
    from backend.config.slurm_spec import load_slurm
    run = adopt(load_slurm(a.cluster), a.job_id, store=_store(a), options=_options(a))
    print(run.run_id)
    return 0


def cmd_runs(a) -> int:
    runs = _store(a)
    found = runs.list_all()
    if a.json:   # metrics: each one's last and best global value, as this machine copied them
        from backend.watch import summary   # imported here: numpy, for --json only
        print_json([{"damaged": str(s)} if isinstance(s, ConsoleError) else
                    {"run_id": s.run_id, "phase": str(s.phase), "attempt": s.attempt, "tasks": len(s.tasks),
                     "created": s.created, "owner": s.owner,
                     "metrics": summary.of_mirror(runs.path(s.run_id))["global"]}
                    for s in found])
        return 0
    for state in found:
        if isinstance(state, ConsoleError):   # a damaged run is shown, never hidden
            print(f"(damaged) {state}")
            continue
        owner = identity.Identity.of(state.owner)
        print(f"{state.run_id}  {state.phase:<10} attempt {state.attempt}  tasks {len(state.tasks)}"
              + (f"  by {owner.shown()}" if owner else ""))
    return 0


def cmd_runs_show(a) -> int:
    from backend.runs import record
    from backend.watch import summary
    run = _attach(a)
    if run.state.live:   # versions.json is written at each task's start: keep what is there now
        record.keep_host_versions(run)
    shown = record.view(run.state, run.local_dir)
    # Its metrics as this machine copied them (the Runs page's source): last and best values.
    found = summary.of_mirror(run.local_dir)["global"]
    if a.json:
        print_json({**shown, "metrics": found})
        return 0
    print(f"run {shown['run_id']}: {shown['phase']}, {len(shown['attempts'])} attempt(s)")
    for line in record.summary(shown):
        print(f"  {line}")
    for name, v in found.items():
        best = f", best {v['best']:.6g} at step {v['best_step']}" if v["best"] is not None else ""
        last = "n/a" if v["last"] is None else f"{v['last']:.6g}"
        print(f"  metric {name}: last {last} at step {v['last_step']}{best}")
    return 0


def cmd_trust_host(a) -> int:
    from backend.access import audit
    from backend.hosts.known_hosts import KnownHosts, OnChange, Verdict
    from backend.hosts.trust import fetch_host_key
    options = _options(a)
    offered = fetch_host_key(a.host, port=a.port, options=options)
    name, fp = offered.view.known_hosts_name, offered.fingerprint
    if a.fingerprint is None:
        print(f"{offered.view.label} offers {offered.key.get_name()} {fp}")
        if offered.verdict is Verdict.TRUSTED:
            print(f"already trusted as {name} in {a.known_hosts}")
            return 0
        if offered.verdict is Verdict.CHANGED:
            _, old = KnownHosts.read(a.known_hosts).check(name, offered.key.get_name(), offered.key.asbytes())
            print("CHANGED: known_hosts trusts " + ", ".join(f"{e.fingerprint} (line {e.number})" for e in old)
                  + ". This can be an attack; replace it only if you know the host was reinstalled: "
                  f"check the new key on the host, then run again with --fingerprint {fp} --replace")
            return 1
        print(f"Check it on the host (ssh-keygen -lf /etc/ssh/ssh_host_*.pub), then run again with "
              f"--fingerprint {fp}")
        return 1
    on_change = OnChange.REPLACE if a.replace else OnChange.REFUSE
    audit.trusted_host(_store(a).root, a.host, a.fingerprint, port=a.port, options=options,
                       on_change=on_change)
    print(f"trusted {offered.view.label} {fp} as {name} in {a.known_hosts}")
    return 0


def _prog() -> str:
    # The same parser answers to `tfconsole` (the installed command) and `python -m backend`.
    return "tfconsole" if os.path.basename(sys.argv[0]) == "tfconsole" else "python -m backend"


def cmd_console(a) -> int:
    """Open the console. backend never imports console (imports flow console -> backend), so the
    console runs as its own process, as `make run` starts it."""
    import subprocess
    argv = [sys.executable, "-m", "console", "--address", a.address, "--port", str(a.port),
            *(["--auth-file", os.path.abspath(a.auth_file)] if a.auth_file else [])]
    env = dict(os.environ, **({"TFCONSOLE_RUNS": os.path.abspath(a.runs)} if a.runs else {}))
    try:
        return subprocess.call(argv, env=env)
    except KeyboardInterrupt:
        return 130


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=_prog(),
                                description="Launch and manage TensorFlow multi-worker runs over SSH.",
                                epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default=None, help="local runs folder (default ./runs or $TFCONSOLE_RUNS)")
    p.add_argument("--known-hosts", default="~/.ssh/known_hosts", help="known_hosts file to verify host keys")
    p.add_argument("--ssh-config", default="~/.ssh/config", help="ssh_config for aliases and ProxyJump")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    def add(name, fn, help):
        s = sub.add_parser(name, help=help, description=help, epilog=EXIT_CODES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        s.set_defaults(fn=fn)
        return s
    add("tf-config", cmd_tf_config, "print every task's TF_CONFIG as JSON").add_argument("cluster")
    s = add("preflight", cmd_preflight, "check every host and print a table")
    s.add_argument("cluster"); s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s = add("launch", cmd_launch, "start a run on every host and print its run id")
    s.add_argument("cluster"); s.add_argument("job")
    s.add_argument("--run-id", help="name the run (default: a timestamp)")
    s.add_argument("--wait", type=float, metavar="SECONDS", help="wait for the run to end")
    s = add("status", cmd_status, "each task's state: starting, running, exited(code), lost")
    s.add_argument("run"); s.add_argument("--json", action="store_true", help="print JSON for scripts")
    s = add("logs", cmd_logs, "print a run's logs")
    s.add_argument("run"); s.add_argument("--task", help="one task, e.g. worker-1")
    s.add_argument("--follow", action="store_true", help="keep printing new lines")
    add("stacks", cmd_stacks, "every task's Python stacks, now (a hung run: where each worker is)"
        ).add_argument("run")
    s = add("stop", cmd_stop, "stop every task (TERM, then KILL) and check nothing is left")
    s.add_argument("run"); s.add_argument("--grace", type=float, default=1.0,
                                          help="seconds between INT/TERM and KILL for tasks still alive")
    s.add_argument("--save", action="store_true",
                   help="first every worker saves one step (a checkpoint Restore offers first), then stops")
    s.add_argument("--save-grace", type=float, default=60.0,
                   help="seconds to wait for that save before the plain stop goes on")
    s = add("keep", cmd_keep, "watch a run and restart it on failure (launch starts this detached)")
    s.add_argument("run"); s.add_argument("--poll", type=float, default=1.0, help="seconds between checks")
    s.add_argument("--ssh-options", help="SSHOptions as JSON (launch passes its own)")
    s.add_argument("--take-over", action="store_true",
                   help="if the run has a keeper, wait for it to exit and then keep the run (restore passes this)")
    s = add("attach-slurm", cmd_attach_slurm, "follow a Slurm job the console did not submit: status, logs, stop")
    s.add_argument("cluster", help="a cluster file with kind: slurm (its login host)")
    s.add_argument("job_id", help="the job id squeue shows")
    s = add("runs", cmd_runs, "list runs; `runs show RUN` shows what one ran")
    s.add_argument("--json", action="store_true", help="print JSON for scripts")
    shows = s.add_subparsers(dest="runs_command", metavar="show")
    r = shows.add_parser("show", help="what a run ran: code (hash, git commit, diff), specs, versions, packages",
                         description="What a run ran: its code (module hash, git commit and uncommitted "
                                     "diff), cluster and job specs, each host's versions, the chief's "
                                     "packages, and its alerts (the webhook masked).")
    r.add_argument("run"); r.add_argument("--json", action="store_true", help="print JSON for scripts")
    r.set_defaults(fn=cmd_runs_show)
    add_commands(add)
    sweep_command(add)
    audit_command(add)
    metrics_command(add)
    goodput_command(add)
    profile_command(add)
    tensorboard_command(add)
    s = add("console", cmd_console, "open the console in a browser (prints the URL with its login token)")
    s.add_argument("--port", type=int, default=8501, help="port to listen on (default 8501)")
    s.add_argument("--address", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--auth-file", help="sign in with the team's OpenID provider: a secrets.toml with its "
                   "[auth] settings (docs/team.md, \"Sign-in with the team's identity provider\"); default: the token URL")
    s = add("trust-host", cmd_trust_host, "show a host's SSH key fingerprint and, when confirmed, trust it")
    s.add_argument("host", help="a host name, IP or ~/.ssh/config alias (its HostName, Port and ProxyJump apply)")
    s.add_argument("--port", type=int, help="SSH port (default: from ssh_config, else 22)")
    s.add_argument("--fingerprint", help="the SHA256:... fingerprint you checked")
    s.add_argument("--replace", action="store_true",
                   help="replace a different key already trusted for this host (after you checked the new one)")
    return p


def main(argv: list[str] | None = None) -> int:
    # Everything printed may hold a job's or a host's text (reasons, diagnoses, log tails, host
    # errors): control sequences in it are shown as escapes, never run by the terminal.
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None) -> int:
    a = parser().parse_args(argv)
    # Who acts: this OS user here; the keeper acts on its own (its lines say "keeper").
    identity.set_default(identity.local("keeper" if a.command == "keep" else "cli"))
    try:
        return a.fn(a)
    except ConsoleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the last resort: one line, never a traceback
        print(f"error: unexpected {type(err).__name__}: {err}. This is a bug in the console: "
              "run the command again, and if it repeats, report this line.", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
