"""Value parsers for the cluster, job and sweep specs: allow-lists, each error naming the field
and the fix. Each parser takes (value, where) and returns the normalised value or raises
SpecError(where, ...) (SpecErrors for nested mappings), whatever the input type."""
from __future__ import annotations

import copy
import difflib
import ipaddress
import math
import os
import re
import reprlib
import shlex
from enum import Enum
from pathlib import PurePosixPath
from typing import Mapping

from backend.errors import SpecError, SpecErrors

# ---- field parsers ----------------------------------------------------------------------------
# Each parser takes (value, where) and returns the normalised value or raises SpecError(where, ...)
# (SpecErrors for nested mappings). They never raise anything else, whatever the input type.

REQUIRED = object()

_HOSTNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")  # no leading '-': it would be an ssh option
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}")
_COMMAND_NAME = re.compile(r"[A-Za-z0-9_./+~:@%,=-]{1,4096}")  # no whitespace, quotes or shell metacharacters
_IPV6_CHARS = re.compile(r"[0-9A-Fa-f:.]{2,45}")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DIGITS = re.compile(r"[0-9]{1,6}")
_HOST_RULE = ("Use a hostname, IP address or ~/.ssh/config alias: letters, digits, '.', '-' and '_' "
              "(an IPv6 address may be in [brackets]); no spaces, quotes or shell characters.")
_PATH_RULE = "Use a plain path with no newline or NUL character, not starting with '-'."


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


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def whole(value: object) -> int | None:
    """An int from an int, an integral float (spreadsheet cells) or a digit string; else None."""
    if is_int(value):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and DIGITS.fullmatch(value.strip()):
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
        number = whole(value)
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
        number = None if isinstance(item, float) else whole(item)
        if number is None or number < 0:
            raise SpecError(where, f"{show_value(item)} is not a GPU index", fix)
        if number in out:
            raise SpecError(where, f"GPU {number} is listed twice", fix)
        out.append(number)
    return tuple(out)


def parse_count(value: object, where: str) -> int:
    if not is_int(value) or value < 0:
        raise SpecError(where, f"expected a whole number of 0 or more, got {show_value(value)}", "Use 0, 1, 2, ...")
    return value


def parse_seconds(value: object, where: str) -> float:
    number = value if is_int(value) else value if isinstance(value, float) and math.isfinite(value) else None
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
        if is_int(arg) or (isinstance(arg, float) and math.isfinite(arg)):
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


def mapping(value: object, where: str, fix: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise SpecError(where, f"expected a mapping, got {show_value(value)}", fix)
    return value


def each_entry(value: object, where: str, fix: str, parse) -> dict:
    """A mapping checked entry by entry: every bad entry is reported, not only the first."""
    errors, out = [], {}
    for key, item in mapping(value, where, fix).items():
        name = f"{where}.{key}" if isinstance(key, str) else where
        try:
            out[identifier(key, name, fix)] = parse(key, item, name, fix)
        except SpecError as err:
            errors.append(err)
    if errors:
        raise SpecErrors(errors)
    return out


def identifier(key: object, where: str, fix: str) -> str:
    if not isinstance(key, str) or not IDENT.fullmatch(key):
        raise SpecError(where, f"key {show_value(key)} is not an identifier", fix)
    return key


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


