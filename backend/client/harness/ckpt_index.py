"""List complete checkpoints in a folder. Standard library only: the backend imports it to list
checkpoints cheaply, and a host runs it as ``python -S RUN/lib ckpt_index DIR`` (one JSON list).

A checkpoint ``ckpt-<step>`` is COMPLETE only when both ``ckpt-<step>.index`` and
``ckpt-<step>.meta.json`` exist: TensorFlow writes the ``.index`` last, and the harness writes the
meta file only after the save returned, so the pair proves the save finished.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time

PREFIX = "ckpt"                       # checkpoint_name given to tf.train.CheckpointManager
_INDEX_RE = re.compile(rf"^{PREFIX}-(\d+)\.index$")
_META_RE = re.compile(rf"^{PREFIX}-(\d+)\.meta\.json$")
_TEMP_RE = re.compile(rf"^{PREFIX}-(\d+)_temp$")   # TensorFlow's folder for a save under way


def prefix_path(directory: str, step: int) -> str:
    """The path TensorFlow restores from: ``DIR/ckpt-<step>`` (no suffix)."""
    return os.path.join(directory, f"{PREFIX}-{int(step)}")


def meta_path(directory: str, step: int) -> str:
    return prefix_path(directory, step) + ".meta.json"


def write_json_atomic(path: str, payload: dict) -> None:
    """Write to a temp file in the same folder, then os.replace: readers never see half a file."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)   # mkstemp makes 0600; the watch agent may run as another user
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_meta(directory: str, step: int, *, epoch: int, losses: dict, metrics: dict | None = None,
               versions: dict | None = None) -> None:
    """``ckpt-<step>.meta.json``, written after the save returned: it makes the step complete
    (listed). Its one writer, for harness jobs, ``KerasCallback`` and ``Loop``. ``losses``:
    {task: loss}; ``metrics``: every global value at this step, the loss among them (without
    it, the mean of ``losses``). ``global_loss`` repeats it for readers of older checkpoints."""
    values = {k: float(v) for k, v in losses.items()}
    named = {k: float(v) for k, v in (metrics or {}).items()}
    loss = named.pop("loss", sum(values.values()) / len(values) if values else None)
    write_json_atomic(meta_path(directory, step), {
        "step": int(step), "epoch": int(epoch), "losses": values,
        "metrics": named if loss is None else {"loss": loss, **named}, "global_loss": loss,
        "time": time.time(), **(versions or {})})


def _steps(names: list[str], pattern: re.Pattern) -> set[int]:
    return {int(m.group(1)) for m in map(pattern.match, names) if m}


def _read_meta(path: str) -> dict | None:
    try:
        with open(path) as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return None   # unreadable meta = not complete (e.g. a copy still in flight)
    return meta if isinstance(meta, dict) else None


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def list_complete(directory: str) -> list[dict]:
    """Complete checkpoints in ``directory``, sorted by step; [] if the folder is missing.

    Each dict is the meta file's content plus ``step`` (from the file name), ``prefix`` (the
    path to restore from), ``dir`` and ``files`` (every file of that checkpoint with its size).
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for step in sorted(_steps(names, _INDEX_RE) & _steps(names, _META_RE)):
        meta = _read_meta(meta_path(directory, step))
        if meta is None:
            continue
        stem = f"{PREFIX}-{step}."
        files = {n: _size(os.path.join(directory, n)) for n in names if n.startswith(stem)}
        if None in files.values():
            continue   # retention removed it while we looked
        out.append({**meta, "step": step, "prefix": prefix_path(directory, step),
                    "dir": directory, "files": files})
    return out


def list_partial(directory: str) -> list[int]:
    """Steps that have some checkpoint file but are not complete (for clear refusals)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    complete = {c["step"] for c in list_complete(directory)}
    any_steps = _steps(names, _INDEX_RE) | _steps(names, _META_RE)
    any_steps |= {int(m.group(1)) for m in
                  (re.match(rf"^{PREFIX}-(\d+)\.data-", n) for n in names) if m}
    return sorted(any_steps - complete)


def temp_folders(directory: str) -> list[str]:
    """TensorFlow's temporary folders of unfinished saves (``ckpt-<step>_temp``) in ``directory``."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in sorted(names) if _TEMP_RE.match(n)]


def remove_partial(directory: str, step: int) -> None:
    """Remove what a failed save of ``step`` wrote: its temporary folder and any file of that step
    (never complete: the meta file is written only after the save returned)."""
    stem = f"{PREFIX}-{int(step)}"
    shutil.rmtree(os.path.join(directory, f"{stem}_temp"), ignore_errors=True)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(f"{stem}.") and not name.endswith(".meta.json"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass   # gone already, or a folder: left as it is


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python RUN/lib ckpt_index DIR", file=sys.stderr)
        return 2
    json.dump(list_complete(argv[0]), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
