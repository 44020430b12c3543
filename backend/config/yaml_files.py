"""Bounded YAML files: a cluster, job or sweep file read with limits on size, depth and expanded
nodes (a hostile file is refused before it costs time or memory), and written atomically."""
from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

import yaml

from backend.errors import SpecError

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


