"""Metric lines (raw bytes, one JSON object each) to the store's columns, fast.

Large batches (a console catching up on a long run, or replaying its mirror) go through
pyarrow's JSON reader, C++ and columnar, about 3x faster than ``json.loads`` per line here.
pyarrow comes with Streamlit; without it, or when a batch has anything its schema inference
rejects (a bad line, a field that changes type), the standard library parses the batch instead.
"""
from __future__ import annotations

import io
import json

import numpy as np

from backend.client.harness.contract import metric_line
from backend.watch.metrics import NAMED, records_to_columns
from backend.watch.named_series import fold_loss

ARROW_MIN_LINES = 5000   # below this, pyarrow's fixed cost outweighs its speed
_SCAN = json.JSONDecoder().scan_once
_FLOATS = metric_line.FLOATS + tuple(metric_line.LEGACY)   # the loss: fold_loss


def parse_metric_block(data: bytes) -> tuple[dict, int]:
    """(columns for ``MetricsStore.add_columns``, number of lines that were not usable) of lines
    as they travel and lie on disk: one bytes object, each line ending in a newline. A big block
    goes to pyarrow whole, never split and joined again."""
    count = data.count(b"\n")
    if count >= ARROW_MIN_LINES:
        cols = _with_arrow(data, count)
        if cols is not None:
            return cols, 0
    return records_to_columns(_with_json(data.split(b"\n")[:count]))


def _with_json(lines: list[bytes]) -> list:
    """One strict parse per line ({} where a line is not exactly one JSON object): the agent
    checks only that a line looks like {...}, and lines joined into one array could glue two
    torn lines into one valid object. ``scan_once`` is json.loads' C scanner without its per-call
    wrappers: a third cheaper per line here."""
    records = []
    for line in lines:
        try:
            text = line.decode()
            obj, end = _SCAN(text, 0)
        except (ValueError, StopIteration):   # StopIteration: the scanner found no value at all
            records.append({})
            continue
        records.append(obj if end == len(text) and type(obj) is dict else {})
    return records


def _with_arrow(data: bytes, count: int) -> dict | None:
    """Columns of ``count`` newline-separated lines, or None where pyarrow cannot be sure of
    every line (the caller then parses line by line and quarantines what fails)."""
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        return None
    try:
        table = pj.read_json(io.BytesIO(data))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    names = set(table.column_names)
    if table.num_rows != count or not {"task", "step"} <= names:
        return None
    task, step = table.column("task"), table.column("step")
    if task.type != pa.string() or step.type != pa.int64() or task.null_count or step.null_count:
        return None
    # Task names dictionary-encoded: a million rows name a few tasks, and the store groups
    # rows by these codes (a Python string per row cost a third of the console's catch-up time).
    tasks = task.combine_chunks().dictionary_encode()
    codes = tasks.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    cols = {"task": (tasks.dictionary.to_pylist(), codes), "step": step.to_numpy(),
            "attempt": np.zeros(count, np.int64)}
    if count and np.abs(cols["step"]).max() >= metric_line.STEP_BOUND:
        return None   # metric_line.usable's bound: the line-by-line reader quarantines those lines
    if "attempt" in names:
        att = table.column("attempt")
        if not pa.types.is_integer(att.type) or att.null_count:
            return None
        cols["attempt"] = att.to_numpy().astype(np.int64)
        if count and np.abs(cols["attempt"]).max() >= metric_line.STEP_BOUND:
            return None
    for name in _FLOATS:
        if name not in names:
            cols[name] = np.full(count, np.nan)
            continue
        col = table.column(name)
        if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)
                or pa.types.is_null(col.type)):
            return None
        cols[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    # Named values: arrow infers one struct per key over every line's names (null where a line
    # lacks one); each name's child array is a column already, checked by metric_line's rules.
    named, skipped = {}, 0
    for key in NAMED:
        if key not in names:
            continue
        col = table.column(key).combine_chunks()
        if not pa.types.is_struct(col.type):
            return None     # not an object in some line: the line-by-line reader sorts it out
        for i, field in enumerate(col.type):
            child = col.field(i)
            present = ~child.is_null().to_numpy(zero_copy_only=False)
            if col.null_count:
                present &= col.is_valid().to_numpy(zero_copy_only=False)
            numeric = pa.types.is_floating(field.type) or pa.types.is_integer(field.type)
            if metric_line.name_problem(field.name) or not numeric:
                skipped += int(present.sum())
                continue
            named[(key, field.name)] = (child.cast(pa.float64()).to_numpy(zero_copy_only=False), present)
    cols.update(named=named, skipped_named=skipped)
    cols[metric_line.LEFT_OUT] = _left_out(table, pa) if metric_line.LEFT_OUT in names else {}
    return fold_loss(cols)


def _left_out(table, pa) -> dict[int, list[str]]:
    """Row -> the names its writer left out, for the few rows that list any (a column of
    another type, from a hand-written line, lists none)."""
    col = table.column(metric_line.LEFT_OUT).combine_chunks()
    if not (pa.types.is_list(col.type) and pa.types.is_string(col.type.value_type)):
        return {}
    rows = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False))
    return {int(i): names for i in rows if (names := metric_line.left_out(col[int(i)].as_py()))}
