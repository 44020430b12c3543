"""A job's project folder (issue 49): what ships and what never leaves this machine, the run's
content hash, the size bound and the fields' errors. Real files, a real symlink and a FIFO."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
import tarfile

import pytest

from backend.config.spec import job_from_dict
from backend.errors import SpecError, SpecErrors
from backend.records import project


def make_project(root):
    """A project as people keep them: a package, a config, a script, a .gitignore'd large file,
    a __pycache__, a symlink out of the folder and a FIFO."""
    (root / "models").mkdir(parents=True)
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "net.py").write_text("WIDTH = 8\n")
    (root / "config").mkdir()
    (root / "config" / "settings.yaml").write_text("lr: 0.1\n")
    (root / "train.py").write_text("import models.net\n")
    os.chmod(root / "train.py", 0o755)
    (root / ".gitignore").write_text("data/\n*.ckpt\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"x" * 4096)
    (root / "old.ckpt").write_bytes(b"x")
    (root / "models" / "__pycache__").mkdir()
    (root / "models" / "__pycache__" / "net.cpython-311.pyc").write_bytes(b"\0")
    (root / "secrets").symlink_to("/etc")
    (root / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(root / "pipe")
    return root


def test_the_tree_ships_and_ignored_links_and_special_files_stay_here(tmp_path):
    root = make_project(tmp_path / "proj")
    kept, packed = project.keep(root, tmp_path)
    assert [p for p, _ in packed.files] == [".gitignore", "config/settings.yaml", "models/__init__.py",
                                             "models/net.py", "train.py"]
    why = dict(packed.left_out)
    assert why["data/"] == "ignored" and why["old.ckpt"] == "ignored"
    assert why["models/__pycache__/"] == "ignored"
    assert why["secrets"].startswith("a symlink") and why["passwd"].startswith("a symlink")
    assert why["pipe"] == "not a regular file" and packed.ignore_file == ".gitignore"
    with tarfile.open(kept) as tar:
        assert sorted(tar.getnames()) == [p for p, _ in packed.files]
        assert tar.getmember("train.py").mode == 0o755 and tar.getmember("models/net.py").mode == 0o644
        assert tar.extractfile("models/net.py").read() == b"WIDTH = 8\n"
    info = project.read_info(tmp_path)
    assert info["sha256"] == packed.digest and info["files"] == 5 and info["left_out"] == len(packed.left_out)
    # The host cache names the tar by its bytes' sha256 (hosts/remote.project): recorded too.
    assert info["tar_sha256"] == hashlib.sha256(Path(kept).read_bytes()).hexdigest() != packed.digest


def test_a_tfconsoleignore_wins_over_the_gitignore(tmp_path):
    root = make_project(tmp_path / "proj")
    (root / ".tfconsoleignore").write_text("config/\n")
    packed = project.scan(root)
    assert packed.ignore_file == ".tfconsoleignore"
    names = [p for p, _ in packed.files]
    assert "config/settings.yaml" not in names and "data/big.bin" in names and "old.ckpt" in names


def digest(root, tmp_path) -> str:
    """The hash of the run copy ``keep`` packs of ``root`` (into a fresh run folder each time)."""
    run_dir = Path(tempfile.mkdtemp(dir=tmp_path))
    return project.keep(root, run_dir)[1].digest


def test_the_hash_is_the_content_and_changes_with_one_file(tmp_path):
    root = make_project(tmp_path / "proj")
    first = digest(root, tmp_path)
    os.utime(root / "train.py", (1, 1))                 # a new time is not a new project
    assert digest(root, tmp_path) == first
    (root / "data" / "big.bin").write_bytes(b"y")     # nor is an ignored file
    assert digest(root, tmp_path) == first
    (root / "models" / "net.py").write_text("WIDTH = 16\n")
    assert digest(root, tmp_path) != first


def test_a_folder_over_the_bound_is_refused_naming_its_largest_files(tmp_path):
    root = make_project(tmp_path / "proj")
    (root / "weights.h5").write_bytes(b"w" * 300_000)
    with pytest.raises(SpecError) as err:
        project.scan(root, max_bytes=100_000)
    text = str(err.value)
    assert text.startswith("project: ") and "weights.h5 (0.3 MiB)" in text and ".tfconsoleignore" in text


def test_the_fields_errors_name_the_field_and_what_to_do(tmp_path):
    root = make_project(tmp_path / "proj")
    job = job_from_dict({"kind": "command", "command": ["train.py"], "project": "proj"}, base_dir=tmp_path)
    assert job.project == str(root)
    with pytest.raises(SpecErrors) as err:
        job_from_dict({"kind": "command", "command": ["x"], "project": "nowhere"}, base_dir=tmp_path)
    assert [e.field for e in err.value.errors] == ["project"] and "no folder at" in str(err.value)
    with pytest.raises(SpecErrors) as err:
        job_from_dict({"kind": "command", "command": ["x"], "project": str(root), "files": [str(root / "train.py")]})
    assert [e.field for e in err.value.errors] == ["files"] and "not both" in str(err.value)
    with pytest.raises(SpecErrors) as err:
        job_from_dict({"kind": "command", "command": ["x"], "project": "-rf"})
    assert [e.field for e in err.value.errors] == ["project"]


def test_pyproject_dependencies_are_read_when_there_is_no_requirements_txt(tmp_path):
    """A project that lists what it needs in pyproject.toml (issue 49): preflight checks those;
    a requirements.txt beside it wins (it is what pip installs from); bad TOML names the file."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "nets"\ndependencies = [\n'
                                         '  "numpy>=1.26",\n  "pyyaml",  # config files\n]\n')
    assert project.requirements(root) == ("numpy>=1.26", "pyyaml")
    (root / "requirements.txt").write_text("tensorflow\n")
    assert project.requirements(root) == ("tensorflow",)
    (root / "requirements.txt").unlink()
    (root / "pyproject.toml").write_text('[project]\ndependencies = ["numpy>=>1"]\n')
    with pytest.raises(SpecError, match="dependency 1 is not a requirement"):
        project.requirements(root)
    (root / "pyproject.toml").write_text('[project\n')
    with pytest.raises(SpecError, match="pyproject.toml is not TOML"):
        project.requirements(root)
    (root / "pyproject.toml").write_text('[tool.black]\nline-length = 100\n')
    assert project.requirements(root) == ()


def test_a_file_that_vanishes_while_packing_refuses_the_launch_and_leaves_no_copy(tmp_path, monkeypatch):
    """Another program removes a file between the listing and the packing (an editor's swap
    file, a training script writing its outputs into the folder): the launch is refused naming
    that file, and the run folder holds no copy (issue 49); an earlier run's copy is untouched."""
    root = make_project(tmp_path / "proj")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    kept, _ = project.keep(root, earlier)
    before = kept.read_bytes()
    listing = project.scan

    def scan_then_remove(folder, **kw):
        found = listing(folder, **kw)
        (root / "config" / "settings.yaml").unlink()   # removed after it was listed
        return found
    monkeypatch.setattr(project, "scan", scan_then_remove)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(SpecError, match="config/settings.yaml .* changed while it was packed"):
        project.keep(root, run_dir)
    assert list(run_dir.iterdir()) == []
    assert kept.read_bytes() == before


def test_the_runs_copy_holds_what_was_read_and_its_hash_says_so(tmp_path):
    root = make_project(tmp_path / "proj")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tar_path, packed = project.keep(root, run_dir)
    assert packed.digest == digest(root, tmp_path) and len(packed.digest) == 64   # the same bytes, the same hash
    with tarfile.open(tar_path) as tar:
        assert {m.name: m.size for m in tar.getmembers()} == dict(packed.files)


def test_an_empty_folder_is_refused_naming_what_was_left_out(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SpecError, match="holds no file to ship"):
        project.scan(empty)
    (empty / "__pycache__").mkdir()
    (empty / "__pycache__" / "x.pyc").write_bytes(b"\0")
    with pytest.raises(SpecError, match="no file to ship; 1 left out"):
        project.scan(empty)


def test_a_host_refuses_an_archive_member_outside_the_run_and_keeps_no_half_folder(tmp_path):
    """What a host unpacks (project_cache.py) is checked there too: a member named ``../x`` (an
    archive made by hand, not by the console) is refused, nothing lands outside the run's job/,
    and a first unpack leaves no half folder."""
    import hashlib
    import io as io_
    from backend.client.harness import project_cache
    buf = io_.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("train.py", "../escaped.py"):
            member = tarfile.TarInfo(name)
            member.size = 2
            tar.addfile(member, io_.BytesIO(b"x\n"))
    data = buf.getvalue()
    run = tmp_path / "work" / "runs" / "r1"
    run.mkdir(parents=True)
    with pytest.raises(ValueError, match="outside its folder: '../escaped.py'"):
        project_cache.use(str(run), hashlib.sha256(data).hexdigest(), data, str(run / "job"))
    assert not (run / "escaped.py").exists() and not (run.parent / "escaped.py").exists()
    assert sorted(p.name for p in run.iterdir()) == []     # no job/, no half job.part
