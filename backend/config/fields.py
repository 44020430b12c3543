"""Field parsers for ``backend.config.spec``: allow-lists, each error naming the field and the fix.

Internal to ``backend.config.spec`` (hence the underscores); split out to keep each module readable.
"""
from __future__ import annotations

import copy
import difflib
import ipaddress
import math
import os
import re
import reprlib
import shlex
from contextlib import suppress
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Mapping

import yaml

from backend.errors import SpecError, SpecErrors
from backend.client.harness.jobs import BEST_MODES
from backend.client.harness.metric_line import name_problem

# ---- field parsers ----------------------------------------------------------------------------
# Each parser takes (value, where) and returns the normalised value or raises SpecError(where, ...)
# (SpecErrors for nested mappings). They never raise anything else, whatever the input type.

REQUIRED = object()

_HOSTNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")  # no leading '-': it would be an ssh option
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}")
_COMMAND_NAME = re.compile(r"[A-Za-z0-9_./+~:@%,=-]{1,4096}")  # no whitespace, quotes or shell metacharacters
_IPV6_CHARS = re.compile(r"[0-9A-Fa-f:.]{2,45}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]{1,6}")
_HOST_RULE = ("Use a hostname, IP address or ~/.ssh/config alias: letters, digits, '.', '-' and '_' "
              "(an IPv6 address may be in [brackets]); no spaces, quotes or shell characters.")
_PATH_RULE = "Use a plain path with no newline or NUL character, not starting with '-'."
# Known harness params that must be whole numbers, with their minimum; other params are free.
_INT_PARAMS = {"epochs": 1, "steps_per_epoch": 1, "global_batch_size": 1, "log_every": 1,
               "checkpoint_every": 0, "keep_checkpoints": 0, "keep_best_checkpoints": 0, "seed": None,
               "val_every": 0, "val_steps": 1}
# Known harness params that are seconds: (minimum, whether the minimum itself is allowed, an example).
_SECONDS_PARAMS = {"checkpoint_grace_s": (0.0, True, 30), "startup_timeout_s": (0.0, False, 30),
                   "collective_timeout_s": (0.0, True, 60)}   # 0: no bound on a step


# reprlib stops after a few items and levels, so a message about a huge or deeply shared value
# (a YAML alias expanded a million times) costs microseconds, not the full repr's minutes.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 64, 64, 64
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = _SHORT.maxfrozenset = 6


def show_value(value: object) -> str:
    """A short repr for messages, at most 60 characters; never raises (huge ints refuse str()
    in Python 3.11+) and never walks more than a few items of a container."""
    try:
        text = repr(value[:61]) if isinstance(value, str) else _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a message helper must not fail
        return f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _whole(value: object) -> int | None:
    """An int from an int, an integral float (spreadsheet cells) or a digit string; else None."""
    if _is_int(value):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _text(value: object, where: str, fix: str) -> str:
    if not isinstance(value, str):
        raise SpecError(where, f"expected text, got {show_value(value)}", fix)
    return value


def parse_enum(kind: type[Enum]):
    allowed = ", ".join(m.value for m in kind)

    def parse(value: object, where: str) -> Enum:
        if isinstance(value, kind):
            return value
        if isinstance(value, str):
            for member in kind:
                if member.value == value.strip().lower():
                    return member
        raise SpecError(where, f"unknown value {show_value(value)}", f"Use one of: {allowed}.")
    return parse


def parse_host(value: object, where: str) -> str:
    text = _text(value, where, _HOST_RULE).strip(" ")
    if not text:
        raise SpecError(where, "host is empty", _HOST_RULE)
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            # The character check first: ipaddress accepts any "%scope" suffix, shell characters included.
            if not _IPV6_CHARS.fullmatch(text):
                raise ValueError(text)
            ipaddress.IPv6Address(text)
        except ValueError:
            raise SpecError(where, f"{show_value(value)} is neither a hostname nor an IPv6 address",
                            "Put the port in tf_port or ssh_port, not in host.") from None
        return text
    if not _HOSTNAME.fullmatch(text):
        raise SpecError(where, f"{show_value(value)} has characters a hostname cannot have", _HOST_RULE)
    return text


def parse_port(low: int):
    def parse(value: object, where: str) -> int:
        number = _whole(value)
        if number is None:
            raise SpecError(where, f"expected a whole number, got {show_value(value)}",
                            f"Use a port number from {low} to 65535.")
        if not low <= number <= 65535:
            raise SpecError(where, f"port {number} is out of range", f"Use a port number from {low} to 65535.")
        return number
    return parse


def parse_user(value: object, where: str) -> str:
    fix = "Use a POSIX user name: a letter or '_' first, then letters, digits, '.', '-', '_' (at most 32)."
    if not _USER.fullmatch(_text(value, where, fix)):
        raise SpecError(where, f"{show_value(value)} is not a valid user name", fix)
    return value


def parse_plain_path(value: object, where: str) -> str:
    text = _text(os.fspath(value) if isinstance(value, os.PathLike) else value, where, _PATH_RULE)
    if any(c in text for c in "\0\n\r") or text.startswith("-") or len(text) > 4096:
        raise SpecError(where, f"{show_value(value)} is not a plain path", _PATH_RULE)
    return text


def parse_jump_host(value: object, where: str) -> str:
    fix = "Write it as [user@]host[:port], with an IPv6 host in [brackets]."
    text = _text(value, where, fix)
    user, _, rest = text.rpartition("@")
    if user:
        parse_user(user, where)
    if rest.startswith("["):
        host, bracket, port = rest[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise SpecError(where, f"{show_value(value)} is not [user@]host[:port]", fix)
        port = port[1:]
    else:
        if rest.count(":") > 1:
            raise SpecError(where, f"{show_value(value)} has an IPv6 host without brackets", fix)
        host, _, port = rest.partition(":")
    parse_host(host, where)
    if port or rest.endswith(":"):
        parse_port(1)(port, where)
    return text


def parse_command_name(value: object, where: str) -> str:
    fix = "Use an interpreter name or path with no spaces, quotes or shell characters, e.g. python3."
    text = _text(value, where, fix)
    if not _COMMAND_NAME.fullmatch(text) or text.startswith("-"):
        raise SpecError(where, f"{show_value(value)} is not a plain command name or path", fix)
    if text.startswith("~"):
        # Commands are argv lists, never a shell, so nothing would expand "~" on the host.
        raise SpecError(where, f"{show_value(value)} starts with '~', which no shell expands here",
                        "Give the full path (e.g. /home/you/venv/bin/python), or a path relative "
                        "to the remote home without '~/' (e.g. venv/bin/python).")
    return text


def parse_workdir(value: object, where: str) -> str:
    fix = ("Use a folder path relative to the remote home (or absolute), like tfconsole or /data/tf: "
           "no '..', no spaces or control characters, not starting with '-'.")
    text = _text(value, where, fix)
    if any(c.isspace() or not c.isprintable() for c in text) or len(text) > 4096:
        # Whitespace would split Slurm's #SBATCH --output line (sbatch reads it word by word).
        raise SpecError(where, f"{show_value(value)} has whitespace or a control character", fix)
    # Relative paths already mean "under the home folder"; keeping "~" would need a shell to expand it.
    if text in ("~", "~/"):
        text = "."
    elif text.startswith("~/"):
        text = text[2:].lstrip("/") or "."
    elif text.startswith("~"):
        raise SpecError(where, f"{show_value(value)} names another user's home", fix)
    if text.startswith("-"):
        # The run folder is an argument of python, mkdir, tar and srun: "-c..." would be code.
        raise SpecError(where, f"{show_value(value)} starts with '-', which commands read as an option", fix)
    if ".." in PurePosixPath(text).parts:
        raise SpecError(where, f"{show_value(value)} has a '..' component", fix)
    return text


def parse_gpus(value: object, where: str) -> tuple[int, ...]:
    fix = "List GPU indices as numbers, like [0, 1] or \"0,1\"; leave empty for CPU only."
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        items: list = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    out = []
    for item in items:
        number = None if isinstance(item, float) else _whole(item)
        if number is None or number < 0:
            raise SpecError(where, f"{show_value(item)} is not a GPU index", fix)
        if number in out:
            raise SpecError(where, f"GPU {number} is listed twice", fix)
        out.append(number)
    return tuple(out)


def parse_count(value: object, where: str) -> int:
    if not _is_int(value) or value < 0:
        raise SpecError(where, f"expected a whole number of 0 or more, got {show_value(value)}", "Use 0, 1, 2, ...")
    return value


def parse_seconds(value: object, where: str) -> float:
    number = value if _is_int(value) else value if isinstance(value, float) and math.isfinite(value) else None
    if number is None or number < 0:
        raise SpecError(where, f"expected seconds of 0 or more, got {show_value(value)}", "Use a number like 5 or 0.5.")
    return float(min(number, 1e12))  # a huge int would overflow float()


def parse_module_path(value: object, where: str) -> str:
    text = parse_plain_path(value, where)
    if not text.endswith(".py"):
        raise SpecError(where, f"{show_value(value)} is not a .py file", "Give the path of a job module ending in .py.")
    return text


def parse_command(value: object, where: str) -> tuple[str, ...]:
    fix = "Give the command as a list of arguments, like [train.py, --lr, '0.1']."
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as err:
            raise SpecError(where, f"cannot split {show_value(value)}: {err}", fix) from None
    if not isinstance(value, (list, tuple)):
        raise SpecError(where, f"expected a list, got {show_value(value)}", fix)
    out = []
    for i, arg in enumerate(value):
        if _is_int(arg) or (isinstance(arg, float) and math.isfinite(arg)):
            arg = str(arg)
        if not isinstance(arg, str) or "\0" in arg:
            raise SpecError(f"{where}[{i}]", f"{show_value(arg)} is not a text argument", fix)
        out.append(arg)
    return tuple(out)


_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}")


def parse_bool(value: object, where: str) -> bool:
    """true or false, as YAML writes them (not "yes" in quotes, not 1)."""
    if not isinstance(value, bool):
        raise SpecError(where, f"expected true or false, got {show_value(value)}", "Write true or false.")
    return value


def parse_job_files(value: object, where: str) -> tuple[str, ...]:
    """A command job's local files: plain paths. Each lands in RUN/job/ on every host: by its
    name, or, given as a relative path with folders (``models/net.py``), with that tree, so
    ``import models.net`` works there as at home. Every part is a plain name."""
    fix = "Give a list of local file paths, like [train.py, models/net.py, settings.json]."
    if isinstance(value, (str, os.PathLike)) or not isinstance(value, (list, tuple)):
        raise SpecError(where, f"expected a list of paths, got {show_value(value)}", fix)
    out = []
    for i, item in enumerate(value):
        text = parse_plain_path(item, f"{where}[{i}]")
        kept = landing_name(text) if not os.path.isabs(text) and ".." not in text.split("/") \
            else os.path.basename(text.rstrip("/"))
        bad = [part for part in kept.split("/") if not _FILE_NAME.fullmatch(part)]
        if bad:
            raise SpecError(f"{where}[{i}]", f"{show_value(bad[0])} is not a plain file or folder name",
                            "Rename it to letters, digits, '.', '_', '+' and '-', not starting with '.' or '-'.")
        out.append(text)
    return tuple(out)


def landing_name(path: str) -> str:
    """Where a job file lands under RUN/job/: what follows a ``/./`` mark (rsync's way of saying
    "keep the tree from here"; the spec puts it after the job file's folder), else the typed
    relative path, else the name."""
    if "/./" in path:
        return path.split("/./", 1)[1]
    if not os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.basename(path)


def _mapping(value: object, where: str, fix: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise SpecError(where, f"expected a mapping, got {show_value(value)}", fix)
    return value


def _each_entry(value: object, where: str, fix: str, parse) -> dict:
    """A mapping checked entry by entry: every bad entry is reported, not only the first."""
    errors, out = [], {}
    for key, item in _mapping(value, where, fix).items():
        name = f"{where}.{key}" if isinstance(key, str) else where
        try:
            out[_identifier(key, name, fix)] = parse(key, item, name, fix)
        except SpecError as err:
            errors.append(err)
    if errors:
        raise SpecErrors(errors)
    return out


def parse_params(value: object, where: str) -> dict:
    fix = "Use identifier keys (like epochs) with number, text or true/false values."
    return _each_entry(value, where, fix, _param_value)


def unknown_params(params: Mapping, known: frozenset[str] | None, module_name: str) -> list[SpecError]:
    """A harness job's params that nothing reads: a typo (``steps_per_epcoh``) would otherwise
    launch silently with the default. ``known``: the harness's keys and the module's ``DEFAULTS``;
    None when the module's keys cannot be read without running it (then nothing is refused)."""
    if known is None:
        return []
    out = []
    for key in params:
        if key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"Did you mean {close[0]!r}? " if close else ""
        out.append(SpecError(f"params.{key}", f"unknown key {key!r}",
                             f"{hint}A harness job reads the harness's params (docs/job-contract.md) and the "
                             f"keys of its module's DEFAULTS: fix the name, or add the key to DEFAULTS "
                             f"in {module_name}."))
    return out


def module_param_keys(path: str, harness_keys) -> frozenset[str] | None:
    """The params a harness job module reads: the harness's keys and those of its literal
    ``DEFAULTS = {...}``, read without running it. None when that cannot be known: the file
    unreadable, DEFAULTS built by code, or changed after it is set (``DEFAULTS["x"] = ...``)."""
    import ast
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    keys: set[str] = set(harness_keys)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = [t for t in targets if isinstance(t, ast.Name) and t.id == "DEFAULTS"]
            if any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "DEFAULTS"
                   for t in targets) or (named and not isinstance(node, ast.Assign)):
                return None
            if named:
                try:
                    value = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError):
                    return None
                if not isinstance(value, dict):
                    return None
                keys |= {k for k in value if isinstance(k, str)}
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "DEFAULTS" and node.attr in ("update", "setdefault", "__setitem__")):
            return None
    return frozenset(keys)


def _identifier(key: object, where: str, fix: str) -> str:
    if not isinstance(key, str) or not _IDENT.fullmatch(key):
        raise SpecError(where, f"key {show_value(key)} is not an identifier", fix)
    return key


def _param_value(key: str, item: object, where: str, fix: str) -> object:
    if key == "keep_best_mode" and item not in BEST_MODES:
        raise SpecError(where, f"expected min or max, got {show_value(item)}",
                        "Use min for a loss (lower is better), max for accuracy-like metrics.")
    if key == "keep_best_metric" and (problem := name_problem(item)):
        raise SpecError(where, problem, "Name a metric the job reports, e.g. loss, or val_loss for a job "
                                        "with validation (docs/job-contract.md).")
    if key in _INT_PARAMS:
        low = _INT_PARAMS[key]
        if not _is_int(item) or (low is not None and item < low):
            raise SpecError(where, f"expected a whole number{'' if low is None else f' of {low} or more'}, "
                                   f"got {show_value(item)}", fix)
    if key in _SECONDS_PARAMS:
        low, inclusive, example = _SECONDS_PARAMS[key]
        number = isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item)
        if not number or item < low or (item == low and not inclusive):
            raise SpecError(where, f"expected a number of seconds {'of' if inclusive else 'above'} {low:g}"
                                   f"{' or more' if inclusive else ''}, got {show_value(item)}",
                            f"Set {where} to e.g. {example}.")
    if isinstance(item, float) and not math.isfinite(item):
        raise SpecError(where, f"{show_value(item)} is not a finite number", fix)
    if not isinstance(item, (bool, int, float, str)) or (isinstance(item, str) and "\0" in item):
        raise SpecError(where, f"{show_value(item)} is not a number, text or true/false", fix)
    return item


def parse_env(value: object, where: str) -> dict:
    fix = "Use names like OMP_NUM_THREADS ([A-Za-z_][A-Za-z0-9_]*) with text values; quote true/false."
    return _each_entry(value, where, fix, _env_value)


def _env_value(key: str, item: object, where: str, fix: str) -> str:
    if key == "TF_CONFIG":  # the console writes TF_CONFIG per task; a user copy would break it
        raise SpecError(where, "TF_CONFIG is set by the console", "Remove it from env.")
    if _is_int(item) or (isinstance(item, float) and math.isfinite(item)):
        item = str(item)
    if not isinstance(item, str) or "\0" in item:
        raise SpecError(where, f"{show_value(item)} is not a text value", fix)
    return item


def unknown_keys(data: Mapping, allowed, prefix: str) -> list[SpecError]:
    """A key nothing reads, named with the closest allowed one (``prunner``: "Did you mean 'pruner'?")."""
    out = []
    for key in data:
        if key in allowed:
            continue
        close = difflib.get_close_matches(key, list(allowed), n=1) if isinstance(key, str) else []
        hint = f"Did you mean {close[0]!r}? " if close else ""
        out.append(SpecError(prefix + (key if isinstance(key, str) else show_value(key)),
                             f"unknown key {show_value(key)}", f"{hint}Use only: {', '.join(allowed)}."))
    return out


def parse_fields(data: Mapping, table: dict, prefix: str) -> tuple[dict, list[SpecError]]:
    """Parse every field in ``table`` from ``data``; return the values and all the errors."""
    errors = unknown_keys(data, table, prefix)
    values = {}
    for name, (parse, default) in table.items():
        value = data.get(name)
        if value is None or (isinstance(value, str) and value == ""):
            # Empty form cells and YAML nulls mean "not given".
            if default is REQUIRED:
                errors.append(SpecError(prefix + name, f"{name} is missing", f"Give a value for {name}."))
            else:
                values[name] = copy.copy(default)
            continue
        try:
            values[name] = parse(value, prefix + name)
        except SpecError as err:
            errors.append(err)
        except SpecErrors as errs:
            errors += errs.errors
    return values, errors


def parse_plain(value: object) -> object:
    """Enums and tuples as YAML-friendly scalars and lists."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


# Bounds on a YAML file (a cluster or job spec is a few KiB): hostile files are refused before
# they cost time or memory. Aliases share one parsed node, so a 400-byte file of nested anchors
# ("billion laughs") expands to 9**9 values only when walked; counting nodes with each alias
# expanded catches it first. Depth: PyYAML composes nodes recursively (RecursionError past ~300).
MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 50
MAX_YAML_NODES = 100_000
_YAML_FIX = "A cluster or job file is a few lines of plain YAML: remove what makes it this large."


class _YamlBound(Exception):
    """A bound of the loader was broken; the message says which."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting depth and an expanded node count bound."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _YamlBound(f"is nested deeper than {MAX_YAML_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        _expanded_size(node, {}, set())
        return node


def _expanded_size(node: yaml.Node, sizes: dict, open_: set) -> int:
    """Nodes under ``node`` with every alias expanded; each node counted once, then remembered."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise _YamlBound("has an alias that contains itself")
    open_.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, sizes, open_) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes, open_) + _expanded_size(v, sizes, open_) for k, v in node.value)
    open_.discard(key)
    if size > MAX_YAML_NODES:
        raise _YamlBound(f"expands to more than {MAX_YAML_NODES} nodes (aliases included)")
    sizes[key] = size
    return size


def load_yaml_text(text: str | bytes, source: str) -> object:
    """Parse one YAML document within the bounds above; SpecError naming ``source`` otherwise."""
    if len(text) > MAX_YAML_BYTES:
        raise SpecError("file", f"{source} is larger than {MAX_YAML_BYTES >> 20} MiB", _YAML_FIX)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except _YamlBound as err:
        raise SpecError("file", f"{source} {err}", _YAML_FIX) from None
    except Exception as err:  # noqa: BLE001 - yaml also raises ValueError on hostile text
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SpecError("file", f"{source} is not valid YAML: {first}",
                        "Fix the YAML at the line shown.") from None


def read_yaml(path: str | Path) -> object:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)   # never more than the bound into memory
        text = raw.decode("utf-8") if len(raw) <= MAX_YAML_BYTES else raw
    except (OSError, ValueError) as err:  # ValueError: bad UTF-8 or a NUL in the path
        raise SpecError("file", f"cannot read {path}: {getattr(err, 'strerror', None) or err}",
                        "Check the path and that the file is UTF-8 text.") from None
    return load_yaml_text(text, str(path))


def write_yaml(data: dict, path: str | Path, *, private: bool = False) -> None:
    # Write beside and rename, so a crash never leaves a half-written spec behind.
    # ``private``: readable by the owner only from the first byte on (0600).
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with suppress(FileNotFoundError):
        tmp.unlink()   # a leftover keeps its mode through O_CREAT: start afresh
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(yaml.safe_dump(data, sort_keys=False))
    os.replace(tmp, path)


def hostfile_slots(text: object) -> tuple[list[tuple[str, int]], list[SpecError]]:
    """(host, slot index on that host) for every slot in a hostfile, and the bad lines."""
    if not isinstance(text, str):
        return [], [SpecError("hostfile", f"expected text, got {show_value(text)}", "Paste the hostfile's text.")]
    fix = "Write each line as 'host slots=N' (N from 1 to 1024); '#' starts a comment."
    slots, errors, used = [], [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"line {number}"
        count = 1
        for word in words[1:]:
            key, _, val = word.partition("=")
            count = _whole(val) if key == "slots" and _DIGITS.fullmatch(val) else None
            if count is None or not 1 <= count <= 1024:
                errors.append(SpecError(where, f"cannot read {show_value(word)}", fix))
                break
        try:
            host = parse_host(words[0], where)
        except SpecError as err:
            errors.append(err)
            continue
        if count is None or not 1 <= count <= 1024:
            continue
        first = used.get(host, 0)
        slots += [(host, first + k) for k in range(count)]
        used[host] = first + count
    return slots, errors


_HOST_LINE = re.compile(r"\s*host(?:\s*=\s*|\s+)(.*)", re.IGNORECASE)


def ssh_config_aliases(path: str | Path) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        raise SpecError("file", f"cannot read {path}: {getattr(err, 'strerror', None) or err}",
                        "Check the path and its permissions.") from None
    aliases: list[str] = []
    for line in text.splitlines():
        match = _HOST_LINE.fullmatch(line.split("#", 1)[0])
        for word in (match.group(1).split() if match else []):
            word = word.strip("\"'")
            if any(c in word for c in "*?!"):
                continue  # patterns match many hosts; only a concrete alias can be a task's host
            try:
                alias = parse_host(word, "host")
            except SpecError:
                continue
            if alias not in aliases:
                aliases.append(alias)
    return aliases
