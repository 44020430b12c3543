"""Plain functions behind the cluster and launch forms: table rows <-> specs, and messages per row.

No Streamlit here, so every rule can be tested with plain asserts.
"""
from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from backend.config import tfconfig
from backend.errors import ConsoleError, SpecError, SpecErrors
from backend.client.harness.contract import JOB_DEFAULTS as HARNESS_DEFAULTS
from backend.hosts.resolve import tf_hosts
from backend.config.spec import ClusterSpec, JobSpec, cluster_from_dict, job_from_dict

COLUMNS = ("role", "host", "transport", "tf_port", "ssh_port", "user", "identity_file",
           "jump_host", "address", "python", "workdir", "gpus")
# A spare host (``spares:`` in the cluster file) has a task's fields but no role of its own: it
# takes the role of the task whose host is gone (backend/runs/membership.py).
SPARE_COLUMNS = tuple(c for c in COLUMNS if c != "role")
INT_COLUMNS = ("tf_port", "ssh_port")
PROBLEM = "problem"     # read-only column of the table: what is wrong with that row, "" when fine
_ROW = re.compile(r"^(tasks|spares)\[(\d+)\]")
JOB_PARAMS = ("epochs", "steps_per_epoch", "global_batch_size", "checkpoint_every", "log_every", "pace_s")
FLOAT_PARAMS = ("pace_s",)   # seconds; every other form parameter is a whole number
JOB_SOURCES = ("Example", "Module path", "Command")
RESTART_MODES = ("never", "on_failure")


class ClusterRows(list):
    """The task table's rows, plus what the cluster file holds beside its tasks: the spare hosts'
    rows (``spares``) and ``min_workers``. A list, so every page that reads the task rows (Launch
    included) reads them as before, and ``check_rows`` finds the rest here."""

    def __init__(self, rows=(), spares=(), min_workers: int | None = None) -> None:
        super().__init__(rows)
        self.spares = list(spares)
        self.min_workers = min_workers

    def __eq__(self, other) -> bool:   # an edit of the spares alone is an edit too
        return (list.__eq__(self, other) is True and getattr(other, "spares", []) == self.spares
                and getattr(other, "min_workers", None) == self.min_workers)

    def __ne__(self, other) -> bool:   # list's own __ne__ would ignore the spares
        return not self == other

    __hash__ = None


def cluster_rows(data: dict) -> ClusterRows:
    """Rows for the table editors: one per task, every column present (None when unset), and one
    per spare host (SPARE_COLUMNS) in ``spares``."""
    return ClusterRows([_row(task, COLUMNS) for task in data.get("tasks", [])],
                       [_row(spare, SPARE_COLUMNS) for spare in data.get("spares") or []],
                       data.get("min_workers"))


def _row(task: dict, columns: tuple[str, ...]) -> dict:
    row = {c: task.get(c) for c in columns}
    row["transport"] = row["transport"] or "ssh"
    gpus = row["gpus"]
    row["gpus"] = ",".join(str(g) for g in gpus) if isinstance(gpus, (list, tuple)) else gpus
    return row


def spare_rows(rows) -> list[dict]:
    """The spare hosts' rows that ride with the task rows (none for plain rows)."""
    return table_rows(getattr(rows, "spares", None) or [], SPARE_COLUMNS)


def min_workers(rows) -> int | None:
    value = getattr(rows, "min_workers", None)
    return None if _blank(value) else int(value) if isinstance(value, float) and value.is_integer() else value


def _blank(value) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def table_rows(rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> list[dict]:
    """The editor's rows as spec rows: only ``columns``, so the shown problem never feeds the spec."""
    return [{c: row.get(c) for c in columns} for row in rows]


def rows_to_dict(rows: list[dict]) -> dict:
    """Table rows -> the dict cluster_from_dict reads; blank cells mean "use the default".

    Fully blank rows (a row just added) are skipped. Whole floats (the table's numbers) become ints.
    Spare rows and min_workers (``ClusterRows``) go to ``spares:`` and ``min_workers:``.
    """
    out = {"tasks": [task for _, task in _tasks(rows)]}
    spares = [spare for _, spare in _tasks(spare_rows(rows), SPARE_COLUMNS)]
    if spares:
        out["spares"] = spares
    if min_workers(rows) is not None:
        out["min_workers"] = min_workers(rows)
    return out


def _tasks(rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> list[tuple[int, dict]]:
    """(table row, task dict) for each row that is not fully blank."""
    tasks = []
    for position, row in enumerate(rows):
        task = {}
        for column in columns:
            value = row.get(column)
            if _blank(value):
                continue
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, str):
                value = value.strip()
            task[column] = value
        if task:
            tasks.append((position, task))
    return tasks


@dataclass
class Problem:
    level: str          # error, warning, info
    row: int | None     # 0-based table row, None for the cluster as a whole
    field: str
    message: str
    table: str = "tasks"   # the row's table: "tasks" or "spares" (the spare hosts)

    def text(self) -> str:
        where = ("Cluster" if self.row is None else
                 f"Spare row {self.row + 1}" if self.table == "spares" else f"Row {self.row + 1}")
        return f"{where}: {self.message}"


def check_rows(rows: list[dict]) -> tuple[ClusterSpec | None, list[Problem]]:
    """The cluster (or None) and every problem, each tied to its table row when it has one.

    ``tasks[i]`` (``spares[i]``) in a field counts only the non-blank rows; the problem names
    the row of its table. ``rows`` may be ``ClusterRows``: its spares and min_workers count too.
    """
    data = rows_to_dict(rows)
    positions = {"tasks": [p for p, _ in _tasks(table_rows(rows))],
                 "spares": [p for p, _ in _tasks(spare_rows(rows), SPARE_COLUMNS)]}

    def problem(level: str, field: str, message: str) -> Problem:
        match = _ROW.match(field)
        if not match:
            return Problem(level, None, field, message)
        table, index = match.group(1), int(match.group(2))
        rows_of = positions[table]
        return Problem(level, rows_of[index] if index < len(rows_of) else None, field, message, table)

    try:
        cluster = cluster_from_dict(data)
    except SpecErrors as err:
        return None, [problem("error", e.field, str(e)) for e in err.errors]
    except SpecError as err:
        return None, [problem("error", err.field, str(err))]
    try:   # as the workers dial them (~/.ssh/config): an alias and its HostName are one machine
        hosts = tf_hosts(cluster)
    except ConsoleError:
        hosts = None   # an ssh_config it cannot read: Start reports it, with the fix
    return cluster, [problem(f.level, f.field, f.message) for f in tfconfig.check_cluster(cluster, hosts)]


def _cell_text(problem: Problem) -> str:
    """A problem as its row shows it: led by its column, without the "tasks[1]." the row says."""
    message = problem.message
    if problem.field and message.startswith(problem.field + ": "):
        message = message[len(problem.field) + 2:]
    column = problem.field.split(".", 1)[1] if _ROW.match(problem.field) and "." in problem.field else ""
    if column and not message.startswith(column):
        message = f"{column}: {message}"
    return message if problem.level == "error" else f"{problem.level}: {message}"


def problem_cells(n_rows: int, problems: list[Problem], table: str = "tasks") -> list[str]:
    """The problem column for ``table`` (``n_rows`` rows): each row's problems joined, "" when fine."""
    cells: list[list[str]] = [[] for _ in range(n_rows)]
    for problem in problems:
        if problem.table == table and problem.row is not None and 0 <= problem.row < n_rows:
            cells[problem.row].append(_cell_text(problem))
    return [" | ".join(texts) for texts in cells]


def shown_cells(values) -> list[str]:
    """The problem column as the editor returns it (a new row has None or NaN there)."""
    return [v if isinstance(v, str) else "" for v in values]


def has_edits(editor_state) -> bool:
    """Whether a table editor's state (edited_rows, added_rows, deleted_rows) holds any edit."""
    return isinstance(editor_state, dict) and any(editor_state.get(k) for k in
                                                  ("edited_rows", "added_rows", "deleted_rows"))


def stale_problems(editor_state, shown, problems: list[Problem], n_rows: int, table: str = "tasks") -> bool:
    """After an edit: whether the problem column shown (``shown``, the editor's column) differs
    from the problems of the edited rows, so the table must be drawn again from those rows."""
    return has_edits(editor_state) and shown_cells(shown) != problem_cells(n_rows, problems, table)


def editor_rows(rows: list[dict]) -> tuple[list[dict], list[Problem]]:
    """Rows for the task table's editor, each with its ``problem`` cell first, and the problems
    found (the spares' too, when ``rows`` carries them)."""
    _, problems = check_rows(rows)
    tasks = table_rows(rows)
    cells = problem_cells(len(tasks), problems)
    return [{PROBLEM: cell, **row} for cell, row in zip(cells, tasks)], problems


def spare_editor_rows(rows) -> list[dict]:
    """Rows for the spare hosts' editor, each with its ``problem`` cell first."""
    _, problems = check_rows(rows)
    spares = spare_rows(rows)
    cells = problem_cells(len(spares), problems, "spares")
    return [{PROBLEM: cell, **row} for cell, row in zip(cells, spares)]


def blocking(problems: list[Problem]) -> bool:
    return any(p.level == "error" for p in problems)


# ---- jobs -----------------------------------------------------------------------------------

def examples(folder: Path) -> list[str]:
    """Example job modules: every examples/*.py that defines a model for the harness."""
    out = []
    for path in sorted(Path(folder).glob("*.py")):
        text = path.read_text(errors="replace")
        if "def build_model" in text:
            out.append(path.name)
    return out


def launch_form(job: dict, example_names: tuple[str, ...] = ()) -> dict:
    """First values of the launch form, by widget key, from a job dict (``job_to_dict``): the
    built-in default's, or a live run's (a new session shows what trains). A module named like an
    example (``example_names``, or any module when none are given) is that example; another is
    its path. Params the job leaves unset take the harness defaults.
    """
    params = job.get("params", {})
    restart = job.get("restart") or {}
    form = {"job_source": "Example", "job_example": Path(job.get("module") or "synthetic.py").name,
            "job_module": "", "job_command": "", "job_files": "", "job_project": "", "job_pip_install": False,
            "restart_mode": restart.get("mode", "never"),
            "max_restarts": int(restart.get("max_restarts", 3)),
            "stall_timeout_s": float(restart.get("stall_timeout_s", 300.0))}
    if job.get("kind") == "command":
        form.update(job_source="Command", job_command=shlex.join(job.get("command") or []),
                    job_files=", ".join(job.get("files") or []), job_project=job.get("project") or "",
                    job_pip_install=bool(job.get("pip_install")))
    elif example_names and form["job_example"] not in example_names:
        form.update(job_source="Module path", job_module=job.get("module") or "")
    form.update({f"param_{name}": _param(name, params.get(name, HARNESS_DEFAULTS[name])) for name in JOB_PARAMS})
    return form


def _param(name: str, value):
    return float(value) if name in FLOAT_PARAMS else int(value)


def _split_command(command: str) -> list[str]:
    """The Command field as argv, split like a shell would; a quote left open is the user's typo,
    named as such (shlex's bare ValueError would reach the page as a traceback)."""
    if not command.strip():
        return []
    try:
        return shlex.split(command)
    except ValueError as err:
        raise SpecErrors([SpecError("Command", f"cannot split the command: {err}",
                                    "Close the quote, or escape a literal quote as \\' or \\\".")]) from None


def _split_files(text: str) -> list[str]:
    """The Files field: local paths separated by commas."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _script_paths(argv: list[str], base_dir: Path | None, shipped: tuple[str, ...] = ()) -> list[str]:
    """A relative ``.py`` path in the command that names a file here (the console's folder) made
    absolute: tasks start in their host's home, where ``examples/keras_fit.py`` is not. The file
    must be at that path on every host (the local workers, a shared or identical checkout); a path
    that is not here is left as typed, for a script that lives only on the hosts. A name among
    the ``shipped`` files stays as typed: the task runs in the folder they are shipped to."""
    base = Path(base_dir or Path.cwd())
    return [str(base / a) if a.endswith(".py") and not Path(a).is_absolute() and (base / a).is_file()
            and a not in shipped else a for a in argv]


def job_from_form(values: dict, examples_dir: Path, base_dir: Path | None = None) -> JobSpec:
    """The JobSpec the launch form's values describe (by widget key, as ``launch_form`` makes
    them): an example of ``examples_dir``, a module path or a command. Raises SpecErrors."""
    restart = {"restart_mode": values["restart_mode"], "max_restarts": values["max_restarts"],
               "stall_timeout_s": values.get("stall_timeout_s", 300.0)}
    if values["job_source"] == "Command":
        return build_job(source="command", command=values["job_command"], files=values.get("job_files", ""),
                         project=values.get("job_project", ""), pip_install=values.get("job_pip_install", False),
                         base_dir=base_dir, **restart)
    module = (str(examples_dir / values["job_example"]) if values["job_source"] == "Example"
              else values["job_module"])
    return build_job(source="module", module=module, params={n: values[f"param_{n}"] for n in JOB_PARAMS},
                     base_dir=base_dir, **restart)


def build_job(*, source: str, module: str = "", command: str = "", files: str = "", project: str = "",
              pip_install: bool = False, params: dict | None = None,
              restart_mode: str = "never", max_restarts: int = 3, stall_timeout_s: float = 300.0,
              base_dir: Path | None = None) -> JobSpec:
    """A JobSpec from the launch form; raises SpecErrors (e.g. "no file at ...") for bad input.

    ``source`` is "module" (a harness job file) or "command" (a program run on every host).
    """
    restart = {"mode": restart_mode, "max_restarts": int(max_restarts), "stall_timeout_s": stall_timeout_s}
    if source == "command":
        shipped, folder = _split_files(files), project.strip() or None
        argv = _split_command(command)   # run in the shipped project folder: paths stay as typed
        data = {"kind": "command", "restart": restart, "files": shipped or None, "project": folder,
                "command": argv if folder else _script_paths(argv, base_dir, tuple(Path(f).name for f in shipped))}
        if pip_install:   # only asked for: a checkbox left off sends nothing the spec would refuse
            data["pip_install"] = True
    else:
        data = {"kind": "harness", "module": module.strip(), "restart": restart,
                "params": {k: _param(k, v) for k, v in (params or {}).items() if v is not None}}
        if not data["module"]:
            raise SpecErrors([SpecError("module", "no job module given",
                                        "Pick an example or type the path of a job .py file.")])
    return job_from_dict(data, base_dir=base_dir)
