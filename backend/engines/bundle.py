"""What a run ships to its hosts, as one tar (``remote.install`` unpacks it): the package under
``RUN/lib`` (``lib/tfconsole/``, the client and its harness, and ``lib/__main__.py``, the entry of
every host command) and the job's files under ``RUN/job``. Both engines send it (SSH hosts, and a
Slurm cluster's login host); the keeper sends the package alone to stop or resume from where a run
folder was removed (``harness_bundle``).
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

from backend.client.harness.contract import layout
from backend.config.spec import JobKind, JobSpec
from backend.config.values import landing_name

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "client"   # shipped as lib/tfconsole/


def bundle(job: JobSpec, *, project: bool = True) -> bytes:
    """The files every host needs, as one tar unpacked by ``remote.install``. ``project=False``:
    without the job's project folder, which our hosts take from their cache (``remote.project``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_package(tar)
        if job.kind == JobKind.HARNESS:
            tar.add(job.module, arcname=f"{layout.JOB}/{Path(job.module).name}")
        for path in job.files:   # a command job's own script(s), from the operator's machine
            tar.add(path, arcname=f"{layout.JOB}/{landing_name(path)}")
        if job.project and project:   # the run's packed copy of the project (backend/records/project.py)
            with tarfile.open(job.project) as kept:
                for member in kept.getmembers():
                    if member.isfile():
                        tar.addfile(_renamed(member, f"{layout.JOB}/{member.name}"), kept.extractfile(member))
    return buf.getvalue()


def _renamed(member: tarfile.TarInfo, name: str) -> tarfile.TarInfo:
    out = tarfile.TarInfo(name)
    out.size, out.mode, out.mtime = member.size, member.mode, member.mtime
    return out


def harness_bundle() -> bytes:
    """The package alone, as ``bundle`` packs it: enough for hostctl where a run folder was removed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_package(tar)
    return buf.getvalue()


def _add_package(tar: tarfile.TarFile) -> None:
    """lib/tfconsole/ (the client and its harness/), lib/__main__.py (the entry every host command
    goes through: ``layout.host_argv``), the watch agent among its commands."""
    lib = f"{layout.LIB}/{layout.PACKAGE}"
    for path in sorted(PACKAGE_DIR.glob("*.py")) + sorted(PACKAGE_DIR.glob("harness/*.py")):
        tar.add(path, arcname=f"{lib}/{path.relative_to(PACKAGE_DIR).as_posix()}")
    tar.add(PACKAGE_DIR / "__main__.py", arcname=f"{layout.LIB}/__main__.py")
