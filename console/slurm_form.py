"""The Slurm choice on the Cluster page: form values <-> a ``SlurmSpec``, and its batch-script
preview. The values are plain (no Streamlit here), so each rule is tested with plain asserts.
"""
from __future__ import annotations

from backend.errors import SpecError, SpecErrors
from backend.engines.slurm_script import preview
from backend.config.slurm_spec import SlurmSpec, slurm_from_dict, slurm_to_dict
from backend.config.spec import JobSpec

KINDS = ("SSH hosts", "Slurm")
TEXT_FIELDS = ("host", "partition", "time_limit", "account", "qos", "user", "identity_file", "jump_host",
               "python", "workdir")
NUMBER_FIELDS = {"nodes": 1, "tasks_per_node": 1, "gpus_per_task": 0, "cpus_per_task": 1}


def default_values(python: str) -> dict:
    """The form's first values: Slurm on this machine (the console runs on the login node)."""
    return {"host": "localhost", "transport": "local", "partition": "", "nodes": 1, "tasks_per_node": 2,
            "gpus_per_task": 0, "cpus_per_task": 1, "time_limit": "01:00:00", "account": "", "qos": "",
            "user": "", "identity_file": "", "jump_host": "", "python": python, "workdir": "tfconsole",
            "tf_port": 23456, "extra": ""}


def _extra(text: str) -> dict | str:
    """``mem=16G, exclusive`` -> ``{"mem": "16G", "exclusive": True}``; the spec checks each."""
    out: dict = {}
    for item in (part.strip() for part in (text or "").split(",")):
        if item:
            key, sep, value = item.partition("=")
            out[key.strip().lstrip("-")] = value.strip() if sep else True
    return out


def build(values: dict) -> tuple[SlurmSpec | None, list[str]]:
    """The spec the form describes, or None and one message per bad field (naming it)."""
    data = {"kind": "slurm", **{k: v for k, v in values.items() if v not in ("", None)}}
    data["extra"] = _extra(values.get("extra", ""))
    for name in (*NUMBER_FIELDS, "tf_port", "ssh_port"):
        if isinstance(data.get(name), float) and data[name].is_integer():
            data[name] = int(data[name])
    try:
        return slurm_from_dict(data), []
    except SpecErrors as errs:
        return None, [str(e) for e in errs.errors]
    except SpecError as err:
        return None, [str(err)]


def values_from_spec(spec: SlurmSpec, python: str) -> dict:
    """Form values from a loaded Slurm cluster file."""
    data = slurm_to_dict(spec)
    extra = ", ".join(k if v is True else f"{k}={v}" for k, v in spec.extra.items())
    return {**default_values(python), **{k: v for k, v in data.items() if k not in ("kind", "extra")},
            "extra": extra}


def script_preview(spec: SlurmSpec, job: JobSpec) -> str:
    return preview(spec, job)
