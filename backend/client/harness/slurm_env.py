"""A Slurm task's place in the job, from its step's ``SLURM_*`` variables. Standard library only.

Inside an ``srun`` step every task sees ``SLURM_PROCID`` (its rank), ``SLURM_STEP_NODELIST``
(the step's nodes, compressed: ``gpu[01-03],big7``) and ``SLURM_STEP_TASKS_PER_NODE``
(``2(x3),1``). The batch script starts the step with ``--distribution=block``, so ranks fill
the first node, then the next: rank r's node and its slot on that node follow from the two
lists. Rank 0 is the chief, rank r > 0 is worker r-1; slot k on a node listens on base + k.
"""
from __future__ import annotations

import re

from . import tf_config_doc

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets: ``a[1,3],b`` -> ``a[1,3]``, ``b``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def expand_nodelist(text: str) -> list[str]:
    """``gpu[01-03,7],big`` -> ``gpu01 gpu02 gpu03 gpu7 big`` (zero padding kept)."""
    nodes = []
    for part in _split_top(text.strip()):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\]([^\[\]]*)", part)
        if not m:
            nodes.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for item in ranges.split(","):
            r = _RANGE.match(item)
            if not r:
                raise ValueError(f"cannot read node range {item!r} in {text!r}")
            low, high = r.group(1), r.group(2) or r.group(1)
            nodes += [f"{prefix}{n:0{len(low)}d}{suffix}" for n in range(int(low), int(high) + 1)]
    return nodes


def expand_counts(text: str) -> list[int]:
    """``2(x3),1`` -> ``[2, 2, 2, 1]``."""
    out = []
    for item in text.strip().split(","):
        m = _COUNT.match(item)
        if not m:
            raise ValueError(f"cannot read task counts {text!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def addresses(nodes: list[str], counts: list[int], base_port: int) -> list[str]:
    """``host:port`` of every rank, in rank order (block distribution)."""
    if len(nodes) != len(counts):
        raise ValueError(f"{len(nodes)} nodes but task counts for {len(counts)}")
    return [f"{node}:{base_port + slot}" for node, n in zip(nodes, counts) for slot in range(n)]


def task_name(rank: int) -> str:
    """Rank 0 is the chief; the others are workers 0, 1, ... (the names of backend.config.spec)."""
    return "chief-0" if rank == 0 else f"worker-{rank - 1}"


def tf_config_for(env: dict, base_port: int) -> tuple[str, dict]:
    """This task's name and TF_CONFIG, from an srun step's environment."""
    rank = int(env["SLURM_PROCID"])
    addrs = addresses(expand_nodelist(env["SLURM_STEP_NODELIST"]),
                      expand_counts(env["SLURM_STEP_TASKS_PER_NODE"]), base_port)
    if len(addrs) != int(env["SLURM_STEP_NUM_TASKS"]):
        raise ValueError(f"{len(addrs)} task addresses for {env['SLURM_STEP_NUM_TASKS']} tasks")
    listed = {"chief": addrs[:1], "worker": addrs[1:]}
    task_type, index = ("chief", 0) if rank == 0 else ("worker", rank - 1)
    return task_name(rank), tf_config_doc.build(listed, task_type, index)
