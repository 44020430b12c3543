"""Cluster and job specs: frozen dataclasses validated where they are built, plus YAML, hostfile
and ssh_config import.

Every value here ends up on a remote command line, in an SSH option or in TF_CONFIG, so checks are
allow-lists of characters rather than deny-lists. The dataclasses validate themselves in
``__post_init__`` so that a spec built in code is as safe as one loaded from YAML; the loaders add
field paths (``tasks[1].tf_port``) and report every problem at once. Cross-task checks (duplicate
ports, several chiefs, loopback mixed with remote hosts) live in ``backend.config.tfconfig.check_cluster``,
because a form wants them as findings it can show, not as a refusal to load.

Why one file of this size: the specs and their dict (YAML) forms stay together so that a field
added to a dataclass is added to its loader and writer in the same screen (tests/unit round-trips
every field); the value parsers, job parameters, YAML bounds and host-list imports each have a file
of their own (values.py, params.py, yaml_files.py, host_lists.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Mapping, Sequence


from backend.alerts import settings as alert_settings
from backend.client.harness.contract import JOB_DEFAULTS as HARNESS_DEFAULTS
from backend.errors import SpecError, SpecErrors


class Role(str, Enum):
    CHIEF = "chief"
    WORKER = "worker"
    EVALUATOR = "evaluator"


class TransportKind(str, Enum):
    LOCAL = "local"
    SSH = "ssh"


class RestartMode(str, Enum):
    NEVER = "never"
    ON_FAILURE = "on_failure"


class ShrinkMode(str, Enum):
    """What a run shrunk by ``min_workers`` keeps (backend/runs/membership.py)."""
    KEEP_GLOBAL_BATCH = "keep_global_batch"     # each replica takes a larger share
    KEEP_REPLICA_BATCH = "keep_replica_batch"   # the global batch shrinks; the learning rate scales with it


class JobKind(str, Enum):
    HARNESS = "harness"
    COMMAND = "command"

# Parsers shared by the field tables below; the rest of the package imports them from here too.
from backend.config.values import (  # noqa: F401
    REQUIRED,
    show_value,
    parse_enum,
    parse_host,
    parse_port,
    parse_user,
    parse_plain_path,
    parse_jump_host,
    parse_command_name,
    parse_workdir,
    parse_gpus,
    parse_count,
    parse_seconds,
    parse_module_path,
    parse_command,
    landing_name,
    parse_bool,
    parse_job_files,
    unknown_keys,
    parse_fields,
    parse_plain,
)
from backend.config.params import (  # noqa: F401
    parse_params,
    parse_env,
    unknown_params,
    module_param_keys,
)
from backend.config.yaml_files import (  # noqa: F401
    read_yaml,
    load_yaml_text,
    write_yaml,
)
from backend.config.host_lists import (  # noqa: F401
    hostfile_slots,
    ssh_config_aliases,
)

# Field tables: name -> (parser, default). REQUIRED marks fields with no default. The order is
# the order fields are written to YAML and listed in "unknown key" messages.
_TASK_FIELDS = {
    "role": (parse_enum(Role), REQUIRED),
    "host": (parse_host, REQUIRED),
    "tf_port": (parse_port(1024), REQUIRED),
    "transport": (parse_enum(TransportKind), TransportKind.SSH),
    "ssh_port": (parse_port(1), None),
    "user": (parse_user, None),
    "identity_file": (parse_plain_path, None),
    "jump_host": (parse_jump_host, None),
    "python": (parse_command_name, "python3"),
    "workdir": (parse_workdir, "tfconsole"),
    "gpus": (parse_gpus, ()),
    "address": (parse_host, None),
}
# A spare host (``spares:``): a task's fields; its role is the role of the task it stands in for
# (backend/runs/membership.py), so none need be given.
_SPARE_FIELDS = {**_TASK_FIELDS, "role": (parse_enum(Role), Role.WORKER)}

_RESTART_FIELDS = {
    "mode": (parse_enum(RestartMode), RestartMode.NEVER),
    "max_restarts": (parse_count, 3),
    "backoff_s": (parse_seconds, 5.0),
    "stall_timeout_s": (parse_seconds, 300.0),
    "unreachable_grace_s": (parse_seconds, 120.0),
    "max_preemptions": (parse_count, 10),   # resumes after a preemption's save: not failures
    "host_gone_s": (parse_seconds, 120.0),   # silent this long: the host is gone (spares take over)
    "shrink": (parse_enum(ShrinkMode), ShrinkMode.KEEP_GLOBAL_BATCH),   # what a shrunk run keeps
}


def _init_from_table(obj: object, table: dict) -> None:
    """Validate and normalise a frozen dataclass's own fields, or raise SpecErrors."""
    values, errors = parse_fields({k: getattr(obj, k) for k in table}, table, "")
    if errors:
        raise SpecErrors(errors)
    for name, value in values.items():
        object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class TaskSpec:
    role: Role
    host: str  # hostname, IP or ~/.ssh/config alias
    tf_port: int  # TensorFlow's gRPC server port
    transport: TransportKind = TransportKind.SSH
    ssh_port: int | None = None  # None: from ~/.ssh/config, else 22
    user: str | None = None
    identity_file: str | None = None  # not "~"-expanded here: the transport does that
    jump_host: str | None = None  # ProxyJump, "[user@]host[:port]"
    python: str = "python3"
    workdir: str = "tfconsole"  # relative to the remote home; "~/x" is normalised to "x"
    gpus: tuple[int, ...] = ()  # () = CPU only
    # The name or IP the other workers dial for this task (TF_CONFIG), where they see it under
    # another name than the console does (a private network, a second interface). None: the
    # host's resolved HostName (backend.hosts.resolve.tf_host).
    address: str | None = None

    def __post_init__(self) -> None:
        _init_from_table(self, _TASK_FIELDS)

    @property
    def endpoint(self) -> str:
        """``host:tf_port`` as written (an alias stays an alias): for messages and checks."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.tf_port}"


@dataclass(frozen=True)
class ClusterSpec:
    tasks: tuple[TaskSpec, ...]
    # Hosts kept idle for a task whose host is gone for good: the keeper moves that task there,
    # in order (backend/runs/membership.py). Each entry has a task's fields; its role is ignored.
    spares: tuple[TaskSpec, ...] = ()
    # With no spare left, the next attempt runs without a lost host's tasks if at least this many
    # tasks remain (None: never; backend/runs/membership.py). The global batch stays the same.
    min_workers: int | None = None

    def __post_init__(self) -> None:
        if self.min_workers is not None:
            object.__setattr__(self, "min_workers", parse_count(self.min_workers, "min_workers"))
        for name in ("tasks", "spares"):
            value = getattr(self, name)
            items = tuple(value) if isinstance(value, (list, tuple)) else None
            if items is None or not all(isinstance(t, TaskSpec) for t in items):
                raise SpecError(name, f"expected a list of TaskSpec, got {show_value(value)}",
                                "Build the cluster with cluster_from_dict or TaskSpec(...) objects.")
            object.__setattr__(self, name, items)

    def indexed(self) -> list[tuple[TaskSpec, int]]:
        seen: dict[Role, int] = {}
        out = []
        for task in self.tasks:
            out.append((task, seen.get(task.role, 0)))
            seen[task.role] = seen.get(task.role, 0) + 1
        return out

    def as_cluster(self) -> ClusterSpec:
        """Its tasks as a list of hosts: itself (every cluster kind answers this; kinds.py)."""
        return self

    def task_names(self) -> list[str]:
        return [f"{task.role.value}-{index}" for task, index in self.indexed()]


@dataclass(frozen=True)
class RestartPolicy:
    mode: RestartMode = RestartMode.NEVER
    max_restarts: int = 3
    backoff_s: float = 5.0
    stall_timeout_s: float = 300.0  # no progress for this long counts as a failure
    unreachable_grace_s: float = 120.0  # a host that does not answer this long counts as failed
    max_preemptions: int = 10  # a run preempted more often than this ends failed (a loop guard)
    # A host that has not answered over SSH for this long is gone for good: its tasks move to a
    # spare (ClusterSpec.spares) instead of the run waiting for it (backend/runs/membership.py).
    host_gone_s: float = 120.0
    # Run on fewer tasks (the cluster's min_workers): keep the global batch (each replica takes a
    # larger share), or keep each replica's batch and scale the learning rate by new/old replicas.
    shrink: ShrinkMode = ShrinkMode.KEEP_GLOBAL_BATCH

    def __post_init__(self) -> None:
        _init_from_table(self, _RESTART_FIELDS)


def _restart(value: object, where: str) -> RestartPolicy:
    if isinstance(value, RestartPolicy):
        return value
    if not isinstance(value, Mapping):
        raise SpecError(where, f"expected a mapping, got {show_value(value)}",
                        f"Write it as keys {', '.join(_RESTART_FIELDS)}.")
    values, errors = parse_fields(value, _RESTART_FIELDS, where + ".")
    if errors:
        raise SpecErrors(errors)
    return RestartPolicy(**values)


_JOB_FIELDS = {
    "kind": (parse_enum(JobKind), REQUIRED),
    "module": (parse_module_path, None),
    "command": (parse_command, ()),
    "files": (parse_job_files, ()),
    "project": (parse_plain_path, None),
    "pip_install": (parse_bool, False),
    "params": (parse_params, {}),
    "env": (parse_env, {}),
    "restart": (_restart, RestartPolicy()),
    "alerts": (alert_settings.parse, {}),   # a webhook: a secret, kept out of the run's state
}


@dataclass(frozen=True)
class JobSpec:
    kind: JobKind
    module: str | None = None  # HARNESS: a job module file (.py)
    command: tuple[str, ...] = ()  # COMMAND: argv
    files: tuple[str, ...] = ()  # COMMAND: local files shipped to RUN/job/ on every host (its cwd)
    # COMMAND: a local folder shipped, tree and all, as RUN/job/ (its cwd): backend/records/project.py.
    # Once launched, the run's own packed copy (runs/<id>/project.tar).
    project: str | None = None
    # COMMAND with a project: pip installs its requirements into each host's Python before the
    # tasks start (logged in RUN/logs/pip-install.log); off, preflight only checks them.
    pip_install: bool = False
    params: Mapping[str, int | float | str | bool] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    restart: RestartPolicy = RestartPolicy()
    alerts: Mapping[str, str] = field(default_factory=dict)   # backend.alerts.settings.parse

    def __post_init__(self) -> None:
        values, errors = parse_fields({k: getattr(self, k) for k in _JOB_FIELDS}, _JOB_FIELDS, "")
        errors += _job_cross_errors(values, "")
        if errors:
            raise SpecErrors(errors)
        for name, value in values.items():
            object.__setattr__(self, name, value)


# What each job kind needs and refuses: (field it needs, why, fix), (field it refuses, why, fix).
_KIND_FIELDS = {
    JobKind.HARNESS: (("module", "a harness job needs a module", "Give the path of a job module file ending in .py."),
                      ("command", "a harness job takes no command", "Remove command, or set kind: command.")),
    JobKind.COMMAND: (("command", "a command job needs a command", "Give the program and its arguments as a list."),
                      ("module", "a command job takes no module", "Remove module, or set kind: harness.")),
}


def _job_cross_errors(values: dict, prefix: str) -> list[SpecError]:
    """Checks that need two fields: what each job kind requires and refuses."""
    if values.get("kind") not in _KIND_FIELDS:
        return []
    (needed, *need), (refused, *refuse) = _KIND_FIELDS[values["kind"]]
    errors = [] if values.get(needed) else [SpecError(prefix + needed, *need)]
    errors += [SpecError(prefix + refused, *refuse)] if values.get(refused) else []
    if values["kind"] == JobKind.HARNESS and values.get("files"):
        errors.append(SpecError(prefix + "files", "a harness job takes no files",
                                "Remove files (the module is shipped with the run), or set kind: command."))
    if values["kind"] == JobKind.HARNESS and values.get("project"):
        errors.append(SpecError(prefix + "project", "a harness job takes no project folder",
                                "Set kind: command and run your script from the folder, or use a module."))
    if values.get("project") and values.get("files"):
        errors.append(SpecError(prefix + "files", "a job takes a project folder or files, not both",
                                "Put the files in the project folder and remove files."))
    if values.get("pip_install") and not values.get("project"):
        errors.append(SpecError(prefix + "pip_install", "installs a project's requirements, and the job has no project",
                                "Give project: (a folder with requirements.txt or pyproject.toml), "
                                "or remove pip_install."))
    return errors


# ---- clusters ---------------------------------------------------------------------------------

def cluster_from_dict(data: object) -> ClusterSpec:
    """Build a cluster from plain data (parsed YAML or a form); raise SpecErrors listing all problems."""
    fix = "Write it as `tasks:` followed by one `- role: ..., host: ..., tf_port: ...` entry per task."
    if not isinstance(data, Mapping):
        raise SpecErrors([SpecError("cluster", f"expected a mapping with a tasks list, got {show_value(data)}", fix)])
    errors = unknown_keys(data, ("tasks", "spares", "min_workers"), "")
    tasks = data.get("tasks")
    if not isinstance(tasks, (list, tuple)) or not tasks:
        errors.append(SpecError("tasks", f"expected a non-empty list of tasks, got {show_value(tasks)}", fix))
        raise SpecErrors(errors)
    spares = data.get("spares") or ()
    if not isinstance(spares, (list, tuple)):
        errors.append(SpecError("spares", f"expected a list of hosts, got {show_value(spares)}",
                                "Write it as `spares:` followed by one `- host: ..., tf_port: ...` entry per spare."))
        spares = ()
    built = _task_list(tasks, "tasks", _TASK_FIELDS, fix, errors)
    spare_fix = "Write each spare like a task: `- host: ..., tf_port: ...` (its role is the lost task's)."
    kept = _task_list(spares, "spares", _SPARE_FIELDS, spare_fix, errors)
    least = data.get("min_workers")
    if least is not None:
        try:
            least = parse_count(least, "min_workers")
        except SpecError as err:
            errors.append(err)
    if errors:
        raise SpecErrors(errors)
    return ClusterSpec(tuple(built), tuple(kept), least)


def _task_list(items, where: str, table: dict, fix: str, errors: list) -> list[TaskSpec]:
    """Each entry of a ``tasks:`` or ``spares:`` list as a TaskSpec; problems go to ``errors``."""
    built = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            errors.append(SpecError(f"{where}[{i}]", f"expected a mapping, got {show_value(item)}", fix))
            continue
        values, task_errors = parse_fields(item, table, f"{where}[{i}].")
        errors += task_errors
        if not task_errors:
            built.append(TaskSpec(**values))
    return built


def _task_to_dict(task: TaskSpec) -> dict:
    out = {}
    for name, (_, default) in _TASK_FIELDS.items():
        value = getattr(task, name)
        # Required fields always; others only when they differ, so saved files stay short.
        if default is REQUIRED or value != default:
            out[name] = parse_plain(value)
    return out


def cluster_to_dict(cluster: ClusterSpec) -> dict:
    out = {"tasks": [_task_to_dict(t) for t in cluster.tasks]}
    if cluster.spares:   # a spare's role is not its own: it takes the lost task's
        out["spares"] = [{k: v for k, v in _task_to_dict(t).items() if k != "role"} for t in cluster.spares]
    if cluster.min_workers is not None:
        out["min_workers"] = cluster.min_workers
    return out


def load_cluster(path: str | Path) -> ClusterSpec:
    return cluster_from_dict(read_yaml(path))


def save_cluster(cluster: ClusterSpec, path: str | Path) -> None:
    write_yaml(cluster_to_dict(cluster), path)


# ---- jobs -------------------------------------------------------------------------------------

def job_from_dict(data: object, *, base_dir: Path | None = None) -> JobSpec:
    """Build a job; a relative module path resolves against ``base_dir`` (default: the cwd)."""
    if not isinstance(data, Mapping):
        raise SpecErrors([SpecError("job", f"expected a mapping, got {show_value(data)}",
                                    "Write it as keys kind, module or command, params, env, restart.")])
    values, errors = parse_fields(data, _JOB_FIELDS, "")
    module = values.get("module")
    if module:
        # Resolved now so the spec means the same file whatever the cwd is later.
        path = Path(os.path.expanduser(module))
        path = path if path.is_absolute() else Path(base_dir or Path.cwd()) / path
        values["module"] = module = str(path.absolute())
        if not path.is_file():
            errors.append(SpecError("module", f"no file at {module}",
                                    "Check the path; a relative path is read from the job file's folder."))
    if values.get("files"):
        values["files"] = _local_files(values["files"], base_dir, errors)
    if values.get("project"):
        values["project"] = _project(values["project"], base_dir, errors)
    if values.get("kind") == JobKind.HARNESS and module and Path(module).is_file():
        # Only here, where a user's file or form is read: a saved run's record is read back
        # through JobSpec as it was launched.
        known = module_param_keys(module, HARNESS_DEFAULTS)
        errors += unknown_params(values.get("params") or {}, known, Path(module).name)
    errors += _job_cross_errors(values, "") if "kind" in values else []
    if errors:
        raise SpecErrors(errors)
    return JobSpec(**values)


def _local_files(files: tuple[str, ...], base_dir: Path | None, errors: list) -> tuple[str, ...]:
    """``files`` made absolute (against ``base_dir``, like ``module``), each marked with the tree
    it keeps (``BASE/./models/net.py``: ``values.landing_name``); a missing one, or two that
    would land on one name in RUN/job/, appended to ``errors``."""
    out, names = [], set()
    for i, text in enumerate(files):
        path = Path(os.path.expanduser(text))
        keeps_tree = not path.is_absolute() and ".." not in path.parts and len(path.parts) > 1
        path = (path if path.is_absolute() else Path(base_dir or Path.cwd()) / path).absolute()
        if not path.is_file():
            errors.append(SpecError(f"files[{i}]", f"no file at {path}",
                                    "Check the path; a relative path is read from the job file's folder."))
        if keeps_tree:
            kept = f"{Path(base_dir or Path.cwd()).absolute()}/./{Path(text).as_posix()}"
        else:   # a saved run's record holds the mark already: kept as it is
            kept = text if os.path.isabs(text) and "/./" in text else str(path)
        name = landing_name(kept)
        if name in names:
            errors.append(SpecError(f"files[{i}]", f"two files land as {name!r}",
                                    "Rename one, or give it with its folder (models/net.py): "
                                    "every file lands in the run's job/ folder."))
        names.add(name)
        out.append(kept)
    return tuple(out)


def _project(text: str, base_dir: Path | None, errors: list) -> str:
    """The project folder made absolute (against ``base_dir``, like ``module``): a folder, or a
    run's packed copy (``project.tar``, as a launched run's record names it)."""
    path = Path(os.path.expanduser(text))
    path = (path if path.is_absolute() else Path(base_dir or Path.cwd()) / path).absolute()
    if not (path.is_dir() or (path.name == "project.tar" and path.is_file())):
        errors.append(SpecError("project", f"no folder at {path}",
                                "Give your project's folder; a relative path is read from the job file's folder."))
    return str(path)


def job_to_dict(job: JobSpec) -> dict:
    out = {"kind": job.kind.value}
    if job.module is not None:
        out["module"] = job.module
    if job.command:
        out["command"] = list(job.command)
    if job.files:
        out["files"] = list(job.files)
    if job.project:
        out["project"] = job.project
    if job.pip_install:
        out["pip_install"] = True
    if job.params:
        out["params"] = dict(job.params)
    if job.env:
        out["env"] = dict(job.env)
    if job.restart != RestartPolicy():
        out["restart"] = {k: parse_plain(getattr(job.restart, k)) for k in _RESTART_FIELDS}
    if job.alerts:
        out["alerts"] = dict(job.alerts)
    return out


def load_job(path: str | Path) -> JobSpec:
    return job_from_dict(read_yaml(path), base_dir=Path(path).absolute().parent)


def save_job(job: JobSpec, path: str | Path) -> None:
    data = job_to_dict(job)
    folder = Path(path).absolute().parent
    if job.module and Path(job.module).is_relative_to(folder):
        # A module beside the job file stays relative so the pair can be moved together.
        data["module"] = str(Path(job.module).relative_to(folder))
    if job.files:
        data["files"] = [str(Path(f).relative_to(folder)) if Path(f).is_relative_to(folder) else f
                         for f in job.files]   # Path drops a "/./" mark: models/net.py again
    if job.project and Path(job.project).is_relative_to(folder):
        data["project"] = str(Path(job.project).relative_to(folder)) or "."
    write_yaml(data, path, private=True)   # its env may hold an API key


# ---- imports and defaults ---------------------------------------------------------------------

def import_hostfile(text: str, *, tf_port: int = 12345, python: str = "python3",
                    workdir: str = "tfconsole") -> ClusterSpec:
    """Horovod/DeepSpeed hostfile ("host slots=N") -> one SSH task per slot, the first the chief.

    Slot k on a host gets ``tf_port + k``, counted across repeated lines for that host so ports
    never collide. Raises SpecError naming the line (SpecErrors when several lines are bad).
    """
    slots, errors = hostfile_slots(text)
    tf_port = parse_port(1024)(tf_port, "tf_port")
    tasks = []
    for host, k in slots:
        if tf_port + k > 65535:
            errors.append(SpecError("tf_port", f"slot {k} on {host} would need port {tf_port + k}",
                                    "Use a lower base tf_port or fewer slots."))
            continue
        role = Role.CHIEF if not tasks else Role.WORKER
        tasks.append(TaskSpec(role=role, host=host, tf_port=tf_port + k, python=python, workdir=workdir))
    if not errors and not tasks:
        errors.append(SpecError("hostfile", "no hosts found", "Add one line per host, like 'node1 slots=2'."))
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)
    return ClusterSpec(tuple(tasks))


def import_ssh_config(path: str | Path) -> list[str]:
    """Concrete Host aliases from an ssh_config file, in order; [] if the file does not exist."""
    return ssh_config_aliases(path)


DEFAULT_PORTS = (23456, 23457)


def default_cluster(python: str, ports: Sequence[int] = DEFAULT_PORTS) -> ClusterSpec:
    """Two local workers on this machine; worker 0 acts as chief (TensorFlow's rule with no chief)."""
    return ClusterSpec(tuple(
        TaskSpec(role=Role.WORKER, host="127.0.0.1", tf_port=port, transport=TransportKind.LOCAL,
                 python=python)
        for port in ports))


def default_job(examples_dir: Path) -> JobSpec:
    return JobSpec(kind=JobKind.HARNESS, module=str(Path(examples_dir) / "synthetic.py"),
                   params={"epochs": 3, "steps_per_epoch": 100})
