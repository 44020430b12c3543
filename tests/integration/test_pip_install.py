"""``pip_install: true`` (issue 49): the project's requirements installed into each host's own
Python before any task starts, only when the job asks. Each loopback SSH host gets its own
venv (seeing the suite's TensorFlow and pip, installing into its own site-packages),
and the project ships its dependency as a wheel with `--no-index --find-links wheels`, so nothing
is downloaded. Without the option preflight names what is missing; a requirement pip cannot meet
fails the launch naming the host and pip's error, with no task started.

Real parts: two sshd hosts, real venvs, real pip, the launcher. No TensorFlow."""
from __future__ import annotations

import base64
import hashlib
import site
import subprocess
import sys
import zipfile

import pytest

from backend.config.spec import cluster_from_dict, job_from_dict
from backend.errors import ConsoleError
from backend.hosts.preflight import PreflightFailed
from backend.runs import launcher
from backend.runs.store import RunStore
from rig import sshd
from tests.conftest import processes_of, ssh_task


def wheel(folder, name: str, version: str) -> None:
    """A pure-Python wheel holding ``name/__init__.py`` (VALUE = version), made by hand."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VALUE = {version!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(text.encode())}\n" for path, text in files.items()) + f"{dist}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in {**files, f"{dist}/RECORD": record}.items():
            whl.writestr(path, text)


def bare_venv(path) -> str:
    """A host's own Python: a new venv that sees the suite's packages (TensorFlow, which preflight
    asks for, and pip) through a .pth line, and installs into its own site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    own = next((path / "lib").glob("python3*/site-packages"))
    (own / "suite.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return str(path / "bin" / "python")


def test_pip_install_puts_the_projects_requirements_into_each_hosts_python(
        ssh_hosts, client_key, tmp_path, ssh_options):
    pythons = [bare_venv(tmp_path / f"venv{n}") for n in (2, 3)]
    cluster = cluster_from_dict({"tasks": [
        ssh_task(h, role, sshd.free_port(), client_key, py, tmp_path / f"work{n}")
        for h, role, py, n in zip(ssh_hosts, ("chief", "worker"), pythons, (2, 3))]})
    folder = tmp_path / "proj"
    wheel(folder / "wheels", "tinypkg", "1.0")
    (folder / "train.py").write_text("import tinypkg\nprint('tinypkg', tinypkg.VALUE, flush=True)\n")
    (folder / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinypkg==1.0\n")
    store = RunStore(tmp_path / "runs")

    def job(**extra):
        return job_from_dict({"kind": "command", "command": ["python", "train.py"], "project": str(folder),
                              "env": {"PATH": f"{tmp_path / 'venv2' / 'bin'}:/usr/bin:/bin"}, **extra})
    with pytest.raises(PreflightFailed) as missing:   # not asked: checked, named, nothing installed
        launcher.launch(cluster, job(), store=store, options=ssh_options)
    assert str(missing.value).count("tinypkg missing") == 2, str(missing.value)

    run = launcher.launch(cluster, job(pip_install=True), store=store, options=ssh_options)
    run.wait(timeout=120)
    assert run.reload().phase == "finished", run.log_tail("chief-0")
    assert "tinypkg 1.0" in run.log_tail("chief-0") and "tinypkg 1.0" in run.log_tail("worker-0")
    for py in pythons:   # into each host's own Python, never the console's
        found = subprocess.run([py, "-c", "import tinypkg, sys; print(tinypkg.__file__)"],
                               capture_output=True, text=True)
        assert found.returncode == 0 and found.stdout.startswith(str(tmp_path / "venv")), found
    assert subprocess.run([sys.executable, "-c", "import tinypkg"], capture_output=True).returncode != 0
    log = next((tmp_path / "work2" / "runs").glob(f"{run.run_id}*/logs/pip-install.log")).read_text()
    assert "-m pip install" in log and "Successfully installed tinypkg-1.0" in log, log

    (folder / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinypkg==2.0\n")
    with pytest.raises(ConsoleError) as err:
        launcher.launch(cluster, job(pip_install=True), store=store, options=ssh_options,
                        preflight=launcher.Preflight.SKIP)
    said = str(err.value)
    assert "pip install failed" in said and "tinypkg==2.0" in said and "127.0.0." in said, said
    failed = [r for r in store.list() if r.run_id != run.run_id]
    assert [r.phase for r in failed] == ["failed"] and failed[0].tasks[0].pid is None, failed
    assert processes_of(run) == []
