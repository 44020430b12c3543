"""A host's cache of project folders (``project:``), so an unchanged project is sent once.

Each run's project is one tar (deterministic: the same folder gives the same bytes), named here
by its sha256 in ``<workdir>/projects/``, beside the host's ``runs/``. A launch, a restart, a
Restore or another run of the same project finds it and sends nothing; a changed project is a new
tar. The bytes that arrive are checked against their name before they are kept. The cache keeps
the ``KEEP`` most recently used tars. Standard library only.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile

KEEP = 8
NAME = re.compile(r"^[0-9a-f]{64}$")


class NotCached(Exception):
    """The host has no tar of that hash (send it)."""


def folder(run: str) -> str:
    """``<workdir>/projects`` for a run folder ``<workdir>/runs/<id>``."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(run))), "projects")


def use(run: str, digest: str, data: bytes, job_dir: str) -> bool:
    """The project ``digest`` unpacked into ``job_dir``, from the cache or from ``data`` (then
    kept). True when the cache had it. ValueError: a bad name or bytes that are not that tar."""
    if not NAME.match(digest):
        raise ValueError(f"{digest!r} is not a sha256")
    cache = folder(run)
    path = os.path.join(cache, f"{digest}.tar")
    cached = os.path.isfile(path)
    if not cached:
        if not data:
            raise NotCached(digest)
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError("the project's bytes do not match their sha256 (cut short on the way?)")
        os.makedirs(cache, mode=0o700, exist_ok=True)
        part = f"{path}.{os.getpid()}.part"
        try:
            with open(part, "wb") as fh:
                fh.write(data)
            os.replace(part, path)
        finally:   # a full disk: no half tar left in the cache
            if os.path.exists(part):
                os.unlink(part)
    os.utime(path)   # most recently used: kept by the sweep below
    unpack(path, job_dir)
    _sweep(cache)
    return cached


def unpack(path: str, job_dir: str) -> None:
    """Regular files only, none outside ``job_dir``. A first unpack goes into a folder beside it,
    renamed into place once whole, so a full disk leaves no half project; a later attempt of the
    same run (``job_dir`` there, maybe holding the job's own outputs) has each file written
    beside its name and renamed."""
    fresh = not os.path.exists(job_dir)
    target_dir = f"{job_dir}.{os.getpid()}.part" if fresh else job_dir
    try:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if not member.isfile() or member.name.startswith("/") or ".." in parts:
                    raise ValueError(f"refusing a project member outside its folder: {member.name!r}")
                _write(tar, member, os.path.join(target_dir, *parts))
        if fresh:
            os.rename(target_dir, job_dir)
    finally:
        if fresh and os.path.exists(target_dir):
            shutil.rmtree(target_dir, ignore_errors=True)


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, target: str) -> None:
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    part = f"{target}.{os.getpid()}.part"
    try:
        with open(part, "wb") as out:
            out.write(tar.extractfile(member).read())
        os.chmod(part, member.mode & 0o755)
        os.replace(part, target)
    finally:
        if os.path.exists(part):
            os.unlink(part)


def _sweep(cache: str) -> None:
    tars = sorted((e for e in os.scandir(cache) if e.name.endswith(".tar")),
                  key=lambda e: e.stat().st_mtime, reverse=True)
    for old in tars[KEEP:]:
        try:
            os.unlink(old.path)
        except OSError:
            pass   # another run of this host swept it first
