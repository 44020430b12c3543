"""A job's project folder (``project:``), packed once at launch as the run's own copy.

What ships: every regular file below the folder, its tree kept (``models/net.py`` imports as at
home), except what ``.tfconsoleignore`` (or, without one, the folder's ``.gitignore``) names, in
gitignore's syntax (``pathspec``), and what never belongs to a run (``.git/``, ``__pycache__/``,
``*.pyc``). A symlink or a special file is never followed or read: it is left out and listed,
so no file outside the folder is ever read. Above ``MAX_BYTES`` the launch is refused, naming
the largest files.

The copy is ``runs/<id>/project.tar`` (deterministic: sorted names, no times or owners) with
``project.json`` beside it (its content hash, every file and size, what was left out and why):
every attempt, restart and Restore of the run ships that copy, whatever happens to the folder
meanwhile, and ``runs show`` lists it.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pathspec
from packaging.requirements import InvalidRequirement, Requirement

from backend.errors import SpecError
from backend.files import read_dict, write_private

IGNORE_FILES = (".tfconsoleignore", ".gitignore")   # the first one present is read
ALWAYS_LEFT_OUT = (".git/", "__pycache__/", "*.pyc")
MAX_BYTES = 256 << 20
TAR, INFO = "project.tar", "project.json"
LISTED = 200   # files and left-out entries project.json names (the counts cover the rest)


@dataclass(frozen=True)
class Packed:
    digest: str                             # sha256 over every file's name, mode and content
    files: tuple[tuple[str, int], ...]      # (path in the folder, bytes), sorted
    left_out: tuple[tuple[str, str], ...]   # (path, why): ignored, a symlink, a special file
    ignore_file: str | None
    # sha256 of project.tar's bytes: the name of the host cache's copy (<workdir>/projects/).
    # Two hashes on purpose: the content one compares folders, this one checks the bytes sent.
    tar_sha256: str = ""

    @property
    def size(self) -> int:
        return sum(n for _, n in self.files)

    def info(self) -> dict:
        return {"sha256": self.digest, "tar_sha256": self.tar_sha256, "files": len(self.files),
                "bytes": self.size, "left_out": len(self.left_out), "ignore_file": self.ignore_file,
                "listed": [list(f) for f in self.files[:LISTED]],
                "left_out_listed": [list(x) for x in self.left_out[:LISTED]]}


def _rules(folder: Path) -> tuple[pathspec.GitIgnoreSpec, str | None]:
    for name in IGNORE_FILES:
        path = folder / name
        if path.is_file() and not path.is_symlink():
            return pathspec.GitIgnoreSpec.from_lines([*ALWAYS_LEFT_OUT, *path.read_text().splitlines()]), name
    return pathspec.GitIgnoreSpec.from_lines(ALWAYS_LEFT_OUT), None


def scan(folder: str | Path, *, max_bytes: int = MAX_BYTES) -> Packed:
    """What ``folder`` ships, by name and size, with no file read (its ``digest`` is empty:
    ``keep`` hashes what it packs), or SpecError on ``project`` (no folder; too large, naming
    why). The Launch form's preview and ``keep`` both start here."""
    root = Path(folder)
    if not root.is_dir():
        raise SpecError("project", f"no folder at {root}", "Give the path of your project's folder.")
    rules, ignore_file = _rules(root)
    files, left_out = [], []
    for here, dirs, names in os.walk(root, followlinks=False):
        rel_here = Path(here).relative_to(root)
        for name in sorted(dirs):   # a folder a rule names is not walked at all
            rel = (rel_here / name).as_posix()
            if os.path.islink(os.path.join(here, name)):
                left_out.append((rel, "a symlink (not followed)"))
                dirs.remove(name)
            elif rules.match_file(rel + "/"):
                left_out.append((rel + "/", "ignored"))
                dirs.remove(name)
        dirs.sort()
        for name in sorted(names):
            rel = (rel_here / name).as_posix()
            mode = os.lstat(os.path.join(here, name)).st_mode
            if stat.S_ISLNK(mode):
                left_out.append((rel, "a symlink (not followed)"))
            elif not stat.S_ISREG(mode):
                left_out.append((rel, "not a regular file"))
            elif rules.match_file(rel):
                left_out.append((rel, "ignored"))
            else:
                files.append((rel, os.path.getsize(os.path.join(here, name))))
    if not files:
        why = f"; {len(left_out)} left out by {ignore_file or 'the rules'}" if left_out else ""
        raise SpecError("project", f"{root} holds no file to ship{why}",
                        "Give the folder your script lives in, or check what the ignore file lists.")
    total = sum(n for _, n in files)
    if total > max_bytes:
        largest = ", ".join(f"{p} ({n / 2**20:.1f} MiB)" for p, n in sorted(files, key=lambda f: -f[1])[:5])
        raise SpecError("project", f"{root} holds {total / 2**20:.0f} MiB to ship, over the "
                        f"{max_bytes / 2**20:.0f} MiB bound; the largest: {largest}",
                        f"List data and outputs in {root / IGNORE_FILES[0]} (gitignore syntax); "
                        "give the hosts large data another way")
    return Packed("", tuple(sorted(files)), tuple(sorted(left_out)), ignore_file)


def summary(packed: Packed) -> str:
    """One line for the Launch form: what will be sent and what stays here."""
    left = f"; {len(packed.left_out)} left out" if packed.left_out else ""
    rule = f" ({packed.ignore_file})" if packed.ignore_file else ""
    return f"{len(packed.files)} files ({packed.size / 2**20:.2f} MiB){left}{rule}"


def _mode(path: Path) -> int:
    return 0o755 if os.stat(path).st_mode & 0o100 else 0o644


def keep(folder: str | Path, run_dir: Path) -> tuple[Path, Packed]:
    """Pack ``folder`` into the run's own copy: (the tar's path, what it holds). Each file is
    read once, for the tar and the hash alike, so a file edited meanwhile cannot make them
    differ; one that vanishes or cannot be read refuses the launch (SpecError naming it) and
    leaves no copy behind."""
    listed = scan(folder)
    buf, hashed, files = io.BytesIO(), hashlib.sha256(), []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, _ in listed.files:
            path = Path(folder) / rel
            try:
                data, mode = path.read_bytes(), _mode(path)
            except OSError as err:
                raise SpecError("project", f"{rel} in {folder} changed while it was packed "
                                f"({err.strerror or err})",
                                "Launch again once nothing adds or removes files in the folder, "
                                "or list that file in .tfconsoleignore") from None
            member = tarfile.TarInfo(rel)
            member.size, member.mode, member.mtime = len(data), mode, 0
            tar.addfile(member, io.BytesIO(data))
            hashed.update(f"{rel}\0{mode}\0".encode() + hashlib.sha256(data).digest())
            files.append((rel, len(data)))
    packed = Packed(hashed.hexdigest(), tuple(files), listed.left_out, listed.ignore_file,
                    tar_sha256=hashlib.sha256(buf.getvalue()).hexdigest())
    tar_path = run_dir / TAR
    part = run_dir / f".{TAR}.{os.getpid()}.part"
    try:
        part.write_bytes(buf.getvalue())
        os.chmod(part, 0o600)
        os.replace(part, tar_path)
    finally:
        part.unlink(missing_ok=True)
    write_private(run_dir / INFO, json.dumps(packed.info(), indent=1))
    return tar_path, packed


def requirements(folder: str | Path | None) -> tuple[str, ...]:
    """What the project says it needs, as requirement lines: its ``requirements.txt`` (comments,
    blank lines and pip options such as ``-r``/``--index-url`` left out: preflight checks names
    and versions only), or, without one, ``pyproject.toml``'s ``[project] dependencies``; each
    checked to parse; () without a project or either file. SpecError names a bad line."""
    root = Path(folder) if folder and Path(folder).is_dir() else None
    if root is None:
        return ()
    if (root / "requirements.txt").is_file():
        path = root / "requirements.txt"
        lines = [(number, raw.split(" #", 1)[0].strip())
                 for number, raw in enumerate(path.read_text().splitlines(), start=1)]
    elif (root / "pyproject.toml").is_file():
        path = root / "pyproject.toml"
        lines = list(enumerate(_pyproject_dependencies(path), start=1))
    else:
        return ()
    out = []
    for number, line in lines:
        if not line or line.startswith(("#", "-")):
            continue
        try:
            Requirement(line)
        except InvalidRequirement as err:
            where = f"line {number}" if path.name == "requirements.txt" else f"dependency {number}"
            raise SpecError("project", f"{path} {where} is not a requirement ({err})",
                            "Write it as pip reads it, like numpy>=1.26, or remove it") from None
        out.append(line)
    return tuple(out)


def _pyproject_dependencies(path: Path) -> list[str]:
    """``[project] dependencies`` of a pyproject.toml ([] where it has none)."""
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise SpecError("project", f"{path} is not TOML ({err})",
                        "Fix the file (python -c 'import tomllib' reads it the same way), or remove it") from None
    deps = data.get("project", {}).get("dependencies", []) if isinstance(data.get("project"), dict) else []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise SpecError("project", f"{path}: [project] dependencies is not a list of strings",
                        'Write it as dependencies = ["numpy>=1.26", "pyyaml"]')
    return [d.strip() for d in deps]


def read_info(run_dir: Path) -> dict:
    """``project.json`` of a run, or {} (no project, a run from before projects)."""
    return read_dict(Path(run_dir) / INFO)
