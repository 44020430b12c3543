"""Export a checkpoint: ``python RUN/lib export --run-dir RUN [--job JOB.py] [--step S]
[--name NAME] [--formats savedmodel,keras]``. Runs on the chief host, no strategy, CPU only.

The model comes from the harness job module (``build_model``) or, for a command job (no
``--job``), from RUN/checkpoints/model.json: the architecture and Keras (tf_keras or Keras 3)
that ``tfconsole.KerasCallback`` wrote on the chief.

Restores a COMPLETE checkpoint from RUN/checkpoints into a freshly built model, writes
RUN/exports/.tmp-<name>/{saved_model/, model.keras}, reloads both in a FRESH process and
compares predictions on a probe batch, writes result.json, then renames the folder to
RUN/exports/<name>/. Never overwrites: an existing name is refused, as is a checkpoint that is not
complete (``EXPORT REFUSED: ...``, nothing attempted). Any other failure (``EXPORT FAILED: ...``)
removes only its own tmp folder.

``hostctl export`` runs this module in a child process and relays its answer: hostctl's protocol
(its docstring), exit 0 with the result as the last stdout line, or exit ``FAILED`` with
``{"error", "missing"}``; the error's last line also goes to stderr, after any traceback.

The chosen checkpoint is held (``retention.pin``) from the moment it is chosen until this process
ends, so the training's retention cannot delete it mid-export. The process runs with small thread
pools and a raised nice value (``--threads``, ``--nice``): it shares the chief's cores with the
training, and bench/export_during_training.py measures what it costs the training.

Why one file of this size: one host command, run on the chief with the standard library and
TensorFlow only: export, its fresh-process reload check and the checkpoint check share the model-
building and comparing steps, and a host gets no other module to share them through.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ["CUDA_VISIBLE_DEVICES"] = ""   # before TensorFlow loads: export never needs a GPU

from . import ckpt_index, entry, jobs, layout, retention, tfload, train_info
from . import host_commands   # the protocol: FAILED and the answer's shape

TOLERANCE = 1e-5
FORMATS = ("savedmodel", "keras")
PATHS = {"savedmodel": "saved_model", "keras": "model.keras"}
HOLD_TTL_S = 1800   # past any export's end: a hold left by a killed export expires by itself


class Refused(Exception):
    """Nothing was attempted: ``EXPORT REFUSED``."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--job", default=None,
                   help="the job module (none: a command job; the model is built from "
                        "RUN/checkpoints/model.json, which tfconsole.KerasCallback writes)")
    p.add_argument("--step", type=int, default=None, help="default: latest complete checkpoint")
    p.add_argument("--name", default=None, help="default: step-<S>-<timestamp>")
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--threads", type=int, default=1,
                   help="TensorFlow intra- and inter-op threads (0: TensorFlow's default, all cores)")
    p.add_argument("--nice", type=int, default=10, help="added to this process's nice value")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override the run's parameters (default: RUN/train.json's)")
    p.add_argument("--verify", default=None, help=argparse.SUPPRESS)  # the fresh child process
    p.add_argument("--check", default=None, metavar="DIR",
                   help="only read --steps of the checkpoint folder DIR (newest first) with "
                        "TensorFlow's checkpoint reader, until one reads whole (hostctl ckpt-verify)")
    p.add_argument("--steps", default="", help="with --check: the steps, comma separated")
    return p.parse_args(argv)


def choose_checkpoint(run_dir: str, step: int | None) -> tuple[dict, str]:
    """The checkpoint (``None``: the newest) and the id of the hold that keeps it until we end."""
    folder = os.path.join(run_dir, layout.CHECKPOINTS)
    # No look before the lock: a listing taken while retention deletes the previous checkpoint
    # can see none complete (the newest one's meta not yet read, the old one gone); pin lists
    # under the lock that retention holds while it deletes.
    try:
        hold = retention.pin(folder, step, purpose="export", ttl_s=HOLD_TTL_S)
    except retention.HoldError as exc:
        raise Refused(f"{exc}; {_next_good(ckpt_index.list_complete(folder), step or 0)}") from None
    for c in ckpt_index.list_complete(folder):
        if c["step"] == hold["step"]:
            return c, hold["hold"]
    retention.release(folder, hold["hold"])
    raise Refused(f"checkpoint step {hold['step']} vanished from {folder} while held")


def unrestorable(step: int, exc: BaseException, complete: list) -> str:
    """The one wording of a checkpoint TensorFlow cannot restore: export's, a restore's refusal,
    the keeper's fallback."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return (f"checkpoint step {step} cannot be restored ({type(exc).__name__}: {first}); "
            f"{_next_good(complete, step)}")


def check(folder: str, steps: list) -> dict:
    """Read every tensor of each step in ``folder``, newest first, until one reads whole:
    ``{"good": step or None, "damaged": {step: why}}``; a step no longer in ``folder`` is neither.
    The checkpoint reader builds no model, so this costs TensorFlow's import and a read of the
    files: a resume can afford it."""
    import tensorflow as tf
    complete = {c["step"]: c for c in ckpt_index.list_complete(folder)}
    good, damaged = None, {}
    for step in sorted(set(steps), reverse=True):
        if step not in complete:
            # Gone since the caller listed it (retention, on a worker's unheld copy while the
            # run trains): not damaged, just not here; a restore gives that worker the chief's copy.
            continue
        try:
            reader = tf.train.load_checkpoint(complete[step]["prefix"])
            for name in reader.get_variable_to_dtype_map():
                reader.get_tensor(name)   # a cut .data file fails here, not at the load
        except Exception as exc:  # noqa: BLE001 - truncated files raise IndexError, OpError, ...
            damaged[step] = exc
            continue
        good = step
        break
    left = [c for s, c in sorted(complete.items()) if s not in damaged]
    return {"good": good, "damaged": {str(s): unrestorable(s, e, left) for s, e in damaged.items()}}


def _next_good(complete: list, step: int) -> str:
    older = [c["step"] for c in complete if c["step"] < step]
    newer = [c["step"] for c in complete if c["step"] > step]
    parts = [f"the next good one is step {older[-1]}"] if older else []
    parts += [f"a newer good one is step {newer[0]}"] if newer else []
    steps = [c["step"] for c in complete]
    return "; ".join(parts + [f"complete steps: {steps}"])


def load_job(run_dir: str, job_path: str | None, overrides: list):
    """The job with the parameters the run trained with (RUN/train.json), so that a job whose
    model depends on a parameter is rebuilt with the same shapes; no job path (a command job):
    the model its Keras callback described."""
    tfload.load()   # before the job's own `import keras`
    if job_path is None:
        return Described(run_dir)
    job = jobs.load_job(job_path)
    trained = train_info.read(run_dir).get("params") or {}
    items = [f"{k}={v}" for k, v in trained.items()] + list(overrides)
    jobs.settle_params(job, items)
    return job


class Described:
    """A command job's model, as its ``tfconsole.KerasCallback`` described it on the chief
    (RUN/checkpoints/model.json): the architecture, which Keras, the inputs' shapes. It stands
    in for a job module: ``build_model`` (no strategy, no compile) and ``probe_batch``."""

    def __init__(self, run_dir: str):
        path = os.path.join(run_dir, layout.CHECKPOINTS, layout.MODEL_CONFIG)
        try:
            with open(path) as fh:
                self.desc = json.load(fh)
        except (OSError, ValueError) as exc:
            raise Refused(f"this command job left no model description ({path}: "
                          f"{type(exc).__name__}); {_missing_call(run_dir)}") from None
        self.checkpoint_key = self.desc.get("checkpoint_key") or "model"
        if not self.desc.get("config") and not self.desc.get("builder"):
            raise Refused(f"the model cannot be rebuilt from its config "
                          f"({self.desc.get('reason', 'none written')}): "
                          + ("give the loop a builder, tfconsole.Loop(..., build_model=build), "
                             "a function in a module of its own"
                             if self.desc.get("source") == "tfconsole.Loop" else
                             "a subclassed model needs get_config, or save it from the script "
                             "on the chief"))

    def keras(self):
        if self.desc.get("keras") == "tf_keras":
            import tf_keras
            return tf_keras
        import keras
        return keras

    def build_model(self):
        if self.desc.get("builder"):
            return _call_builder(self.desc["builder"])
        try:
            return self.keras().models.model_from_json(json.dumps(self.desc["config"]))
        except Exception as exc:  # noqa: BLE001 - custom layers: unknown to a bare process
            raise RuntimeError(f"cannot rebuild the model from {layout.MODEL_CONFIG} "
                               f"({type(exc).__name__}: {exc}); a custom layer must be "
                               "registered (keras.saving.register_keras_serializable) in a "
                               "module the export process can import") from exc

    def probe_batch(self):
        import numpy as np
        rng = np.random.default_rng(0)
        out = []
        for spec in self.desc.get("inputs") or []:
            shape = [4 if d is None else d for d in spec["shape"]]
            dtype = np.dtype(spec.get("dtype") or "float32")
            out.append(rng.integers(0, 2, shape).astype(dtype) if dtype.kind in "iub"
                       else rng.normal(size=shape).astype(dtype))
        if not out:
            raise Refused(f"{layout.MODEL_CONFIG} names no model inputs, so there is no probe batch")
        return out[0] if len(out) == 1 else out


def _missing_call(run_dir: str) -> str:
    """The one call that writes model.json, for the kind of script this run was (train.json's
    ``source``, written by the callback or the loop on the chief)."""
    source = train_info.read(run_dir).get("source")
    if source == "tfconsole.Loop":
        return ("a custom loop registers its model for export: tfconsole.Loop(strategy, "
                "checkpoint_manager, model=model) (or build_model=a function in its own module)")
    if source == "tfconsole.KerasCallback":
        return ("the callback writes it after the first step: let the job run a step, or pass "
                "the same model to model.fit")
    return ("export rebuilds a command job's model from what tfconsole writes: for model.fit add "
            "callbacks=[tfconsole.KerasCallback()]; for a custom loop (strategy.run) make "
            "tfconsole.Loop(strategy, checkpoint_manager, model=model)")


def _call_builder(entry: dict):
    """The script's registered builder: its module loaded by file (never the training script)."""
    import importlib.util
    folder = os.path.dirname(entry["file"])
    if folder not in sys.path:
        sys.path.insert(0, folder)   # the builder's own imports of its neighbours
    try:
        spec = importlib.util.spec_from_file_location(entry["module"], entry["file"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[entry["module"]] = module
        spec.loader.exec_module(module)
        build = module
        for part in entry["name"].split("."):
            build = getattr(build, part)
    except Exception as exc:  # noqa: BLE001 - a moved or broken module: say which
        raise Refused(f"the registered model builder {entry['module']}.{entry['name']} "
                      f"({entry['file']}) cannot be loaded ({type(exc).__name__}: {exc})") from None
    return build()


def _probe(job, tf):
    if callable(getattr(job, "probe_batch", None)):
        return job.probe_batch()
    ds = job.make_dataset(tf.distribute.InputContext(), 16, 0)
    return next(iter(ds))[0]


def _flat(tf, value):
    return [tf.convert_to_tensor(v).numpy() for v in tf.nest.flatten(value)]


def _save_arrays(path: str, arrays: list) -> None:
    import numpy as np
    np.savez(path, *arrays)


def _load_arrays(path: str) -> list:
    import numpy as np
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def export(args, formats: list[str]) -> dict:
    chosen, hold = choose_checkpoint(args.run_dir, args.step)
    try:
        return _export_held(args, formats, chosen)
    finally:
        retention.release(chosen["dir"], hold)


def _export_held(args, formats: list[str], chosen: dict) -> dict:
    step = chosen["step"]
    name = args.name or f"step-{step}-{time.strftime('%Y%m%d-%H%M%S')}"
    if "/" in name or name.startswith("."):
        raise Refused(f"export name {name!r}: no '/' and no leading '.'")
    exports = os.path.join(args.run_dir, layout.EXPORTS)
    final = os.path.join(exports, name)
    if os.path.exists(final):
        raise Refused(f"export {name!r} already exists in {exports}; choose another --name")
    os.makedirs(exports, exist_ok=True)
    tmp = os.path.join(exports, f".tmp-{name}")
    try:
        os.mkdir(tmp)   # atomic: a second export with the same name cannot share our folder
    except FileExistsError:
        raise Refused(f"{tmp} exists: an export named {name!r} is running or crashed; "
                      f"remove it if no export is running") from None
    try:
        result = _export_into(args, chosen, tmp, formats)
        result.update(name=name, paths={f: os.path.join(final, PATHS[f]) for f in formats})
        ckpt_index.write_json_atomic(os.path.join(tmp, "result.json"), result)
        os.rename(tmp, final)   # fails rather than replace if `final` appeared meanwhile
        return result
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)   # only our own tmp folder, never `final`
        raise


def limit_threads(threads: int, nice: int) -> None:
    """Before TensorFlow loads; the verification child inherits both through env and fork."""
    if threads > 0:
        for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
            os.environ[var] = str(threads)
    if nice > 0:
        os.nice(nice)


def _export_into(args, chosen: dict, tmp: str, formats: list[str]) -> dict:
    import tensorflow as tf
    job = load_job(args.run_dir, args.job, args.param)
    model = job.build_model()
    probe = _probe(job, tf)
    model(probe, training=False)   # create the variables so restore fills them now
    try:
        key = getattr(job, "checkpoint_key", "model")   # the script's own name for the model
        status = tf.train.Checkpoint(**{key: model}).restore(chosen["prefix"])
        status.expect_partial().assert_existing_objects_matched()
    except Exception as exc:  # noqa: BLE001 - truncated files raise IndexError, OpError, ...
        complete = ckpt_index.list_complete(chosen["dir"])
        raise RuntimeError(unrestorable(chosen["step"], exc, complete)) from exc
    expected = _flat(tf, model(probe, training=False))
    if "savedmodel" in formats:
        export_dir = os.path.join(tmp, PATHS["savedmodel"])
        if isinstance(job, Described) and job.desc.get("keras") == "tf_keras":
            model.export(export_dir)   # tf_keras' export has no `verbose`
        else:
            model.export(export_dir, verbose=False)
    if "keras" in formats:
        model.save(os.path.join(tmp, PATHS["keras"]))
    diffs = _verify_in_child(args, tmp, formats, _flat(tf, probe), expected)
    worst = max(diffs.values())
    if not worst <= TOLERANCE:
        raise RuntimeError(f"exported model disagrees with the checkpoint: max abs diff {diffs} "
                           f"> {TOLERANCE}")
    return {"step": chosen["step"], "checkpoint": chosen["prefix"], "formats": formats,
            "sizes": {f: _size(os.path.join(tmp, PATHS[f])) for f in formats},
            "match": True, "max_abs_diff": worst, "diffs": diffs, "tolerance": TOLERANCE,
            "created": time.time(), "tensorflow": tf.__version__}


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _verify_in_child(args, tmp, formats, probe, expected) -> dict:
    """Load the files in a new interpreter: proves they stand alone, no state from this one."""
    with tempfile.TemporaryDirectory(prefix="export-probe-") as work:
        _save_arrays(os.path.join(work, "probe.npz"), probe)
        _save_arrays(os.path.join(work, "expected.npz"), expected)
        spec = json.dumps({"dir": tmp, "formats": formats, "work": work})
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        extra = [x for kv in args.param for x in ("--param", kv)]
        job = ["--job", args.job] if args.job else []
        proc = subprocess.run(entry.argv("export", "--run-dir", args.run_dir, *job, "--verify", spec,
                                         *extra, site=True),
                              capture_output=True, text=True, env=entry.env(env), timeout=600)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("VERIFY ")]
        if proc.returncode != 0 or not lines:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            raise RuntimeError(f"verification process failed (exit {proc.returncode}):\n{tail}")
        return json.loads(lines[-1][len("VERIFY "):])


def verify(args, spec: dict) -> dict:
    import numpy as np
    import tensorflow as tf
    job = load_job(args.run_dir, args.job, args.param)   # registers custom Keras objects
    keras = job.keras() if isinstance(job, Described) else __import__("keras")
    leaves = _load_arrays(os.path.join(spec["work"], "probe.npz"))
    # Same structure as the parent's probe (a tensor, a dict, ...), the parent's exact values.
    probe = leaves[0] if len(leaves) == 1 else tf.nest.pack_sequence_as(_probe(job, tf), leaves)
    expected = _load_arrays(os.path.join(spec["work"], "expected.npz"))
    got = {}
    if "savedmodel" in spec["formats"]:
        loaded = tf.saved_model.load(os.path.join(spec["dir"], "saved_model"))  # keep a ref:
        got["savedmodel"] = loaded.serve(probe)   # its variables die with the object
    if "keras" in spec["formats"]:
        got["keras"] = keras.models.load_model(os.path.join(spec["dir"], "model.keras"),
                                               compile=False)(probe, training=False)
    return {f: max(float(np.max(np.abs(np.asarray(a) - b)))
                   for a, b in zip(_flat(tf, out), expected)) for f, out in got.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.verify:
        print("VERIFY " + json.dumps(verify(args, json.loads(args.verify))), flush=True)
        return 0
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    limit_threads(args.threads, args.nice)
    try:
        if args.check:
            steps = [int(s) for s in args.steps.split(",") if s.strip()]
            print(json.dumps(check(args.check, steps)), flush=True)
            return 0
        bad = [f for f in formats if f not in FORMATS]
        if bad or not formats:
            raise Refused(f"--formats {args.formats!r}: choose from {','.join(FORMATS)}")
        result = export(args, formats)
    except Refused as exc:
        return failed(f"EXPORT REFUSED: {exc}")
    except Exception as exc:  # noqa: BLE001 - one clear last line for the console
        import traceback
        traceback.print_exc()
        return failed(f"{'CHECK' if args.check else 'EXPORT'} FAILED: {type(exc).__name__}: {exc}")
    print(json.dumps(result), flush=True)
    return 0


def failed(error: str) -> int:
    print(error, file=sys.stderr, flush=True)
    print(json.dumps({"error": error, "missing": False}), flush=True)
    return host_commands.FAILED


if __name__ == "__main__":
    sys.exit(main())
