"""The Slurm cluster kind: what ``sbatch`` is asked for, and the login host that asks.

A cluster file with ``kind: slurm`` describes an allocation instead of a list of hosts:

    kind: slurm
    host: login1              # the login host: an ~/.ssh/config alias, name or IP
    transport: ssh            # or local, when the console runs on the login host
    partition: gpu
    nodes: 2
    tasks_per_node: 4
    gpus_per_task: 1
    time_limit: "04:00:00"

The login host is reached with the same fields (and the same SSH transport) as an SSH task. The
run folder under ``workdir`` must be on a filesystem the login host and the nodes share, as a
home directory is on most Slurm clusters (docs/slurm.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Mapping

from backend.config.values import (REQUIRED, parse_command_name, parse_enum, parse_host, parse_jump_host, parse_fields,
                                   parse_plain, parse_plain_path, parse_port, show_value, parse_user, parse_workdir)
from backend.errors import SpecError, SpecErrors
from backend.config.spec import ClusterSpec, Role, TaskSpec, TransportKind

KIND = "slurm"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_VALUE = re.compile(r"[A-Za-z0-9_.,:=+@%/\[\]-]{1,256}")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_TIME = re.compile(r"\d{1,7}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2}")
# sbatch options a cluster file may add; the rest (ntasks, output, job name) the console owns.
EXTRA_OPTIONS = ("mem", "mem-per-cpu", "mem-per-gpu", "constraint", "reservation", "exclude",
                 "nodelist", "comment", "mail-type", "mail-user", "exclusive")
FLAG_OPTIONS = ("exclusive",)   # given with the value true, written without one


def _name(kind: str):
    fix = f"Use the {kind} name Slurm shows (sinfo, sacctmgr): letters, digits, '.', '-', '_'."

    def parse(value: object, where: str) -> str:
        if not isinstance(value, str) or not _NAME.fullmatch(value.strip()):
            raise SpecError(where, f"{show_value(value)} is not a {kind} name", fix)
        return value.strip()
    return parse


def _positive(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(where, f"expected a whole number of 1 or more, got {show_value(value)}", "Use 1, 2, 3, ...")
    return value


def _gpus_per_task(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(where, f"expected a whole number of 0 or more, got {show_value(value)}",
                        "Use 0 for CPU only, or the GPUs each task needs (1 for one GPU per worker).")
    return value


def _time_limit(value: object, where: str) -> str:
    fix = 'Use minutes (30) or Slurm\'s "HH:MM:SS" / "D-HH:MM:SS" (quote it in YAML: "04:00:00").'
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is None or not _TIME.fullmatch(text) or text.strip("0:-") == "":
        raise SpecError(where, f"{show_value(value)} is not a time limit", fix)
    return text


def _extra(value: object, where: str) -> dict:
    fix = f"Use only these sbatch options: {', '.join(EXTRA_OPTIONS)} (e.g. mem: 16G)."
    if not isinstance(value, Mapping):
        raise SpecError(where, f"expected a mapping of sbatch options, got {show_value(value)}", fix)
    errors, out = [], {}
    for key, item in value.items():
        name = f"{where}.{key}"
        if key not in EXTRA_OPTIONS:
            errors.append(SpecError(name, f"{show_value(key)} is not an allowed sbatch option", fix))
        elif key in FLAG_OPTIONS:
            if item is not True:
                errors.append(SpecError(name, f"{key} takes no value, got {show_value(item)}",
                                        f"Write `{key}: true` or leave it out."))
            else:
                out[key] = True
        elif isinstance(item, bool) or not isinstance(item, (str, int)) or not _VALUE.fullmatch(str(item)):
            errors.append(SpecError(name, f"{show_value(item)} is not a plain sbatch value",
                                    "Use letters, digits and . , : = + @ % / [ ] - only (no spaces)."))
        else:
            out[key] = str(item)
    if errors:
        raise SpecErrors(errors)
    return out


def _slurm_workdir(value: object, where: str) -> str:
    """A workdir that also fits an #SBATCH line: sbatch splits those lines itself, without the
    shell's quoting, and reads '%' in --output as a file name pattern."""
    text = parse_workdir(value, where)
    if any(c in text for c in "'\"\\%"):
        raise SpecError(where, f"{show_value(value)} has a quote, '\\' or '%', which #SBATCH lines cannot carry",
                        "Use a folder path of letters, digits, '/', '.', '_' and '-', like tfconsole.")
    return text


def _kind(value: object, where: str) -> str:
    if value != KIND:
        raise SpecError(where, f"expected {KIND!r}, got {show_value(value)}", "Write `kind: slurm`.")
    return value


_FIELDS = {
    "kind": (_kind, REQUIRED),
    "host": (parse_host, REQUIRED),
    "transport": (parse_enum(TransportKind), TransportKind.SSH),
    "ssh_port": (parse_port(1), None),
    "user": (parse_user, None),
    "identity_file": (parse_plain_path, None),
    "jump_host": (parse_jump_host, None),
    "partition": (_name("partition"), None),
    "nodes": (_positive, 1),
    "tasks_per_node": (_positive, 2),
    "gpus_per_task": (_gpus_per_task, 0),
    "cpus_per_task": (_positive, 1),
    "time_limit": (_time_limit, "01:00:00"),
    "account": (_name("account"), None),
    "qos": (_name("QoS"), None),
    "extra": (_extra, {}),
    "python": (parse_command_name, "python3"),
    "workdir": (_slurm_workdir, "tfconsole"),
    "tf_port": (parse_port(1024), 23456),
}


@dataclass(frozen=True)
class SlurmSpec:
    host: str                               # the login host, where sbatch runs
    kind: str = KIND
    transport: TransportKind = TransportKind.SSH
    ssh_port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    jump_host: str | None = None
    partition: str | None = None            # None: the cluster's default partition
    nodes: int = 1
    tasks_per_node: int = 2
    gpus_per_task: int = 0                  # 0: CPU only (CUDA_VISIBLE_DEVICES is emptied)
    cpus_per_task: int = 1
    time_limit: str = "01:00:00"
    account: str | None = None
    qos: str | None = None
    extra: Mapping[str, str | bool] = field(default_factory=dict)
    python: str = "python3"                 # on the nodes (and the login host), with TensorFlow
    workdir: str = "tfconsole"              # on the shared filesystem, relative to home
    tf_port: int = 23456                    # slot k on a node listens on tf_port + k

    def __post_init__(self) -> None:
        values, errors = parse_fields({f.name: getattr(self, f.name) for f in fields(self)}, _FIELDS, "")
        if errors:
            raise SpecErrors(errors)
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def num_tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    def task_names(self) -> list[str]:
        return self.as_cluster().task_names()

    def as_cluster(self) -> ClusterSpec:
        """The run's tasks as the rest of the console sees them: each reached through the login
        host, whose view of the shared run folder holds every task's files. Rank 0 is the chief."""
        login = dict(host=self.host, transport=self.transport, ssh_port=self.ssh_port, user=self.user,
                     identity_file=self.identity_file, jump_host=self.jump_host, python=self.python,
                     workdir=self.workdir)
        return ClusterSpec(tuple(
            TaskSpec(role=Role.CHIEF if rank == 0 else Role.WORKER, tf_port=min(self.tf_port + rank, 65535),
                     **login)
            for rank in range(self.num_tasks)))

    def login(self) -> TaskSpec:
        return self.as_cluster().tasks[0]


def is_slurm(data: object) -> bool:
    return isinstance(data, Mapping) and data.get("kind") == KIND


def slurm_from_dict(data: object) -> SlurmSpec:
    if not isinstance(data, Mapping):
        raise SpecErrors([SpecError("cluster", f"expected a mapping, got {show_value(data)}",
                                    "Write `kind: slurm` and the fields of docs/slurm.md.")])
    values, errors = parse_fields(data, _FIELDS, "")
    if errors:
        raise SpecErrors(errors)
    return SlurmSpec(**values)


def slurm_to_dict(spec: SlurmSpec) -> dict:
    out = {}
    for name, (_, default) in _FIELDS.items():
        value = getattr(spec, name)
        if default is REQUIRED or value != default:
            out[name] = dict(value) if isinstance(value, Mapping) else parse_plain(value)
    return out


def load_slurm(path) -> SlurmSpec:
    """A cluster file that must be ``kind: slurm`` (``attach-slurm``); SpecError otherwise."""
    from backend.config.yaml_files import read_yaml
    data = read_yaml(path)
    if not is_slurm(data):
        raise SpecError("cluster", f"{path} is not a Slurm cluster file", "Give a file with `kind: slurm`.")
    return slurm_from_dict(data)


def is_slurm_spec(cluster: object) -> bool:
    """Whether a spec the pages hand over is a Slurm cluster (else: rows of our hosts): the one
    place outside the engines that tells the two kinds apart."""
    return isinstance(cluster, SlurmSpec)
