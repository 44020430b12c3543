"""``tfconsole tensorboard RUN``: the chief's TensorBoard event files, copied to the run's local
folder and shown by TensorBoard on 127.0.0.1 (``--once``: copy and exit, for scripts).

The harness writes them on the chief (``tensorboard/``, validation as its own run in
``tensorboard/validation/``), often on another host: they come over the host protocol
(``remote.fetch_new``), only the bytes added since the last copy, every ``COPY_EVERY_S`` while
the run is live. Beside them, the run ``goodput/`` holds the run's goodput (docs/goodput.md)
as scalars, written here at the start and again when the run ends. TensorBoard runs as a child process and ends with this command (Ctrl-C, TERM,
or this process dying), so no server is left behind.
"""
from __future__ import annotations

import importlib.util
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from backend.cli.checkpoints import _attach
from backend.errors import ConsoleError, RunError

# The harness layout, the host protocol and urllib are imported inside the functions that use
# them: this module is imported to build the parser of every command.

ADDRESS = "127.0.0.1"
COPY_EVERY_S = 5.0     # TensorBoard reads its folders again every 5 s: copying more often shows nothing sooner
START_S = 180.0        # TensorBoard imports TensorFlow before it answers: 25 s on a busy 2-core machine
LOG = "tensorboard.log"   # TensorBoard's own output, in the run's local folder (not in its logdir)


def copy_events(run) -> tuple[Path, int, int]:
    """Copy what is new of the chief's event files into the run's local ``tensorboard/``:
    (that folder, files that grew, bytes copied)."""
    from backend.client.harness.contract import layout
    from backend.hosts import remote
    dest = run.local_dir / layout.TENSORBOARD
    changed, fetched = remote.fetch_new(run.remote(run.state.chief.name), layout.TENSORBOARD, dest)
    return dest, changed, fetched


def has_events(folder: Path) -> bool:
    return any(p.name.startswith("events.out.tfevents") for p in folder.rglob("*") if p.is_file())


def require_tensorboard() -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise ConsoleError(f"TensorBoard is not installed for {sys.executable}",
                           "Install the project's requirements (`make .venv/.runtime`, which `make run` "
                           "does, or `pip install -r requirements.txt`: it pins tensorboard); `--once` "
                           "copies the event files without it.")


def pick_port(port: int | None) -> int:
    """``port`` if it is free on 127.0.0.1, or any free one."""
    with socket.socket() as s:
        try:
            s.bind((ADDRESS, port or 0))
        except OSError:
            raise ConsoleError(f"port {port} on {ADDRESS} is in use",
                               "Give another --port, or leave --port out for a free one.") from None
        return s.getsockname()[1]


def tensorboard_argv(logdir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", ADDRESS,
            "--port", str(port), "--reload_interval", str(int(COPY_EVERY_S))]


def _die_with_parent() -> None:
    """In the child: Linux sends it TERM when this process dies, even by KILL (prctl)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass   # not Linux: Ctrl-C and TERM still end it through the finally below


def start(logdir: Path, port: int, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:   # TensorFlow's import noise goes to the file, not the terminal
        return subprocess.Popen(tensorboard_argv(logdir, port), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)


def wait_ready(proc: subprocess.Popen, url: str, log: Path, *, limit_s: float = START_S) -> None:
    """Until TensorBoard lists its runs; its log's tail in the error if it ends or never answers."""
    import urllib.request   # imported here: http.client and email, for this command only
    deadline = time.monotonic() + limit_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}data/runs", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    what = f"ended (exit {proc.returncode})" if proc.poll() is not None else f"did not answer within {limit_s:g} s"
    raise ConsoleError(f"TensorBoard {what}: {' | '.join(tail) or 'no output'}",
                       f"Read {log}; run the command again (with another --port if that one is taken).")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


GOODPUT_RUN = "goodput"   # TensorBoard run beside the chief's: the run's goodput (docs/goodput.md)


def write_goodput(run, dest: Path) -> Path:
    """The run's goodput as scalars in ``dest/goodput/``, one snapshot (the old one replaced):
    ``goodput/share`` (0-1) and ``goodput/<cause>`` in task-seconds, at the run's last step.
    Written with TensorBoard's own event writer: no TensorFlow import on this machine."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from backend.runs import goodput
    found = goodput.here(run.state, run.local_dir)
    folder = dest / GOODPUT_RUN
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("events.out.tfevents*"):
        old.unlink()
    values = [summary_pb2.Summary.Value(tag=f"goodput/{cause.replace(' ', '_')}", simple_value=seconds)
              for cause, seconds in found.causes.items()]
    if found.share is not None:
        values.append(summary_pb2.Summary.Value(tag="goodput/share", simple_value=found.share))
    step = max([a.last_step or 0 for a in run.state.attempts] or [0])
    writer = EventFileWriter(str(folder))
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                     summary=summary_pb2.Summary(value=values)))
    writer.close()
    return folder


def _goodput_quietly(run, dest: Path) -> None:
    """The goodput run is an extra: a machine without the tensorboard package, or a full disk,
    is said and the chief's scalars are served all the same."""
    try:
        write_goodput(run, dest)
    except (ImportError, OSError) as err:
        print(f"warning: no goodput scalars ({err})", file=sys.stderr, flush=True)


def _copy_quietly(run) -> bool:
    """A copy while TensorBoard runs, and whether to copy again: while the run is live, and once
    more after it ends (the writers' last flush). A host that does not answer now is said, and
    tried again."""
    try:
        live = run.reload().live
        dest, _, _ = copy_events(run)
        if not live:   # the run ended: its goodput is final now
            _goodput_quietly(run, dest)
        return live
    except ConsoleError as err:
        print(f"warning: copy failed, tried again in {COPY_EVERY_S:g} s: {err}", file=sys.stderr, flush=True)
        return True


def _first_copy(run) -> Path:
    from backend.client.harness.contract import layout
    dest = run.local_dir / layout.TENSORBOARD
    try:
        dest, changed, fetched = copy_events(run)
        print(f"copied {fetched} bytes ({changed} file(s) new or grown) to {dest}", flush=True)
    except ConsoleError as err:
        if not has_events(dest):
            raise
        print(f"warning: showing the copy made earlier: {err}", file=sys.stderr, flush=True)
    if not has_events(dest):
        raise RunError(f"run {run.run_id} has no TensorBoard event files yet ({layout.TENSORBOARD}/ on "
                       f"{run.state.chief.host})",
                       "The harness writes them from its first sync point on: try again once `tfconsole "
                       "metrics RUN` shows a step. A job of kind command (the Keras callback, tfconsole.Loop) "
                       "writes only metrics.jsonl: see Monitor or `tfconsole metrics RUN`.")
    _goodput_quietly(run, dest)
    return dest


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def cmd_tensorboard(a) -> int:
    run = _attach(a)
    if not a.once:
        require_tensorboard()   # before any copy: the user learns it first
    dest = _first_copy(run)
    if a.once:
        return 0
    port = pick_port(a.port)
    log = run.local_dir / LOG
    proc = start(dest, port, log)
    signal.signal(signal.SIGTERM, _interrupt)   # TERM (kill, a scheduler) ends it as Ctrl-C does
    try:
        url = f"http://{ADDRESS}:{port}/"
        print(f"starting TensorBoard on {dest} (its output: {log}) ...", flush=True)
        wait_ready(proc, url, log)
        print(f"TensorBoard: open {url} (Ctrl-C to stop)", flush=True)
        copying = run.state.live
        while True:
            try:
                proc.wait(timeout=COPY_EVERY_S)
            except subprocess.TimeoutExpired:
                copying = copying and _copy_quietly(run)
                continue
            raise ConsoleError(f"TensorBoard ended (exit {proc.returncode})", f"Read {log}; run the command again.")
    finally:
        stop(proc)


def add_command(add) -> None:
    s = add("tensorboard", cmd_tensorboard, "copy the chief's TensorBoard event files here and open "
                                            "TensorBoard on them (prints the URL)")
    s.add_argument("run")
    s.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    s.add_argument("--once", action="store_true", help="copy the event files and exit (for scripts)")
