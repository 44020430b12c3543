"""The kinds of cluster a cluster file may describe, read and written by the ``kind:`` it names.

A list of hosts (our own SSH or local processes) names no ``kind:``; ``kind: slurm`` is an
allocation (``slurm_spec``). This table is the one place a file is told apart by its kind: a
third kind registers its spec here and its engine in ``backend.engines`` (docs/slurm.md, "The
seam a cluster kind plugs into"). Every spec answers ``as_cluster()``: its tasks as a list of
hosts, which is how the rest of the console sees any run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from backend.config.yaml_files import read_yaml
from backend.config.slurm_spec import KIND as SLURM, SlurmSpec, slurm_from_dict, slurm_to_dict
from backend.config.spec import ClusterSpec, cluster_from_dict, cluster_to_dict

HOSTS = "hosts"   # the kind of a file that names none


@dataclass(frozen=True)
class Kind:
    name: str                               # what ``kind:`` says in a cluster file
    spec: type                              # the class its reader builds
    from_dict: Callable[[Any], Any]         # raises SpecErrors naming each bad field
    to_dict: Callable[[Any], dict]          # what a run's record saves (and from_dict reads back)


KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> None:
    KINDS[kind.name] = kind


register(Kind(HOSTS, ClusterSpec, cluster_from_dict, cluster_to_dict))
register(Kind(SLURM, SlurmSpec, slurm_from_dict, slurm_to_dict))


def named(data: object) -> Kind:
    """The kind a cluster file's content names (no ``kind:``, or one we do not know: a list of
    hosts, whose reader then names what is wrong with it)."""
    name = data.get("kind") if isinstance(data, Mapping) else None
    return KINDS.get(name) if isinstance(name, str) and name in KINDS else KINDS[HOSTS]


def of(spec: object) -> Kind:
    """The kind of a spec in hand."""
    for kind in KINDS.values():
        if isinstance(spec, kind.spec):
            return kind
    raise TypeError(f"no cluster kind is registered for {type(spec).__name__}")


def any_cluster_from_dict(data: object):
    """A cluster file's content, of whichever kind it names."""
    return named(data).from_dict(data)


def any_cluster_to_dict(spec: object) -> dict:
    return of(spec).to_dict(spec)


def load_any_cluster(path):
    return any_cluster_from_dict(read_yaml(path))
