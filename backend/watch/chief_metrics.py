"""The chief's metric lines read from its host, for every reader that does not follow the run:
``tfconsole metrics``, a sweep's keeper, and the copy an ended attempt keeps in the run's own
folder (``keep``, from ``Run.mirror_logs``). With that copy the Runs page, ``runs --json`` and
Compare show a finished run's metrics without its being opened on Monitor first (a sweep's
trials used to read "no loss recorded locally" until each was)."""
from __future__ import annotations

import json
from pathlib import Path

from backend.client.harness.contract import layout, metric_line
from backend.errors import ConsoleError
from backend.files import write_private
from backend.hosts import remote
from backend.watch.journal import MIRROR_DIR
from backend.watch.lines import parse_metric_block
from backend.watch.metrics import MetricsStore

READ_BYTES = 64 << 20     # about 250,000 lines of a run with a few metrics
KEPT = "metrics.jsonl"    # runs/<id>/metrics.jsonl: the chief's lines when an attempt last ended
TAIL_BYTES = 256 << 10    # the newest lines of a local copy: a few thousand, many sync points


def read_lines(run, max_bytes: int = READ_BYTES) -> tuple[bytes, bool]:
    """The chief's whole metric lines (at most its last ``max_bytes``), and whether the file held
    more. A line being written is left for the next read."""
    data = remote.read_tail(run.remote(run.state.chief.name), layout.METRICS, max_bytes + 1)
    cut = len(data) > max_bytes
    if cut:   # drop the partial first line of the tail
        data = data[data.find(b"\n", len(data) - max_bytes) + 1:]
    return data[:data.rfind(b"\n") + 1], cut


def read_store(run, max_bytes: int = READ_BYTES) -> tuple[MetricsStore, bool]:
    """``read_lines`` parsed into a store."""
    data, cut = read_lines(run, max_bytes)
    store = MetricsStore()
    store.add_columns(parse_metric_block(data)[0])
    return store, cut


def kept_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / KEPT


def local_last_step(run_dir: str | Path, attempt: int) -> int | None:
    """The newest step of ``attempt`` in the run's local copies of the chief's metric lines (the
    watch mirror Monitor writes as it follows the run, the copy an ended attempt kept): what this
    machine has seen, whether or not the chief's host answers now."""
    steps = [_last_step_in(path, attempt) for path in (Path(run_dir) / MIRROR_DIR / layout.METRICS, kept_path(run_dir))]
    steps = [s for s in steps if s is not None]
    return max(steps) if steps else None


def _last_step_in(path: Path, attempt: int) -> int | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - TAIL_BYTES))
            data = fh.read()
    except OSError:
        return None
    for raw in reversed(data.splitlines()):
        try:
            line = metric_line.parse(json.loads(raw))
        except (ValueError, RecursionError):   # the cut first line of the tail, a half-written last one
            continue
        if line is not None and line.attempt == attempt:
            return line.step
    return None


def keep(run) -> bool:
    """Copy the chief's metric lines into the run's folder (replacing an earlier attempt's copy);
    best effort, as the log copies: False when the chief's host does not answer or the local
    disk refuses (the watch mirror, if any, still holds what Monitor copied)."""
    try:
        data, _ = read_lines(run)
    except ConsoleError:
        return False
    if not data:
        return True   # no metric lines (a command job without reports): nothing to keep
    try:   # whole or not at all: a reader meets the earlier copy or this one
        write_private(kept_path(run.local_dir), data.decode("utf-8", "replace"))
    except (ConsoleError, OSError):   # a full disk (DiskFullError), a folder gone
        return False
    return True


class NewLines:
    """The chief's metric lines as they grow, for a reader that asks again and again: each
    ``read`` fetches only the bytes after the last whole line it read, where reading the tail
    again moved the whole file each time (8 MB a poll for a long trial)."""

    def __init__(self) -> None:
        self.offset, self.where = 0, None

    def read(self, run) -> tuple[bytes, bool]:
        """(the whole lines written since the last read, whether the reader must start over: the
        file was replaced, or the chief is now another host's). A line being written waits."""
        host = run.remote(run.state.chief.name)
        where, again, out = (host.name, host.run_dir), False, []
        if where != self.where:
            self.offset, self.where, again = 0, where, self.where is not None
        while True:
            try:
                data, size = remote.read_at(host, layout.METRICS, self.offset)
            except remote.NotInstalled:   # the run's folder is not there (yet, or any more)
                break
            if size < 0:
                break   # no metrics yet
            if size < self.offset:   # the file was replaced: read it again from its start
                self.offset, out, again = 0, [], True
                continue
            whole = data[:data.rfind(b"\n") + 1]
            if whole:
                out.append(whole)
                self.offset += len(whole)
            if not whole or self.offset >= size:
                break
        return b"".join(out), again


class Growing:
    """The chief's metric lines in one store as they grow (a sweep's keeper reads it every poll)."""

    def __init__(self, run) -> None:
        self.run, self.new, self.store = run, NewLines(), MetricsStore()

    def read(self) -> MetricsStore:
        """The store with every whole line written so far."""
        data, again = self.new.read(self.run)
        if again:
            self.store = MetricsStore()
        if data:
            self.store.add_columns(parse_metric_block(data)[0])
        return self.store
