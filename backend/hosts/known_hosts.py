"""known_hosts as OpenSSH documents it (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"), read and written
without losing anything.

Every line is kept verbatim unless the operator explicitly replaces that host's key: comments,
blank lines, ``@cert-authority`` and ``@revoked`` lines, hashed names (``|1|salt|hash``) and key
types this product cannot parse (``sk-ssh-ed25519@openssh.com``). Keys are compared as raw blobs,
so a line never needs a key parser to be matched or kept. The file is rewritten atomically
(a unique temporary file, fsync, rename) with mode 0600.

What each line means here, as in OpenSSH:
- a plain line trusts its key for the names it lists (patterns ``*`` ``?`` and ``!negation``);
- ``@revoked`` refuses its key for the names it lists (``*`` for all), whatever other line trusts it;
- ``@cert-authority`` trusts host *certificates* signed by its key; paramiko offers no host
  certificates, so such a line trusts no plain key here (it is kept and otherwise ignored).
"""
from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
import re
import tempfile
from dataclasses import dataclass

from backend.errors import ConsoleError, HostKeyChanged, HostKeyError


def blob_fingerprint(blob: bytes) -> str:
    """OpenSSH's ``SHA256:...`` form, so the operator can compare with ``ssh-keygen -lf``."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class Entry:
    number: int               # 1-based line number, for messages
    marker: str | None        # "@cert-authority", "@revoked" or None
    names: str                # the names field as written (patterns, hashed names)
    key_type: str
    blob: bytes

    @property
    def fingerprint(self) -> str:
        return blob_fingerprint(self.blob)

    def matches(self, name: str) -> bool:
        return names_match(self.names, name)


def _parse(number: int, line: str) -> Entry | None:
    """An entry, or None for a comment, a blank line or anything we cannot read (kept as is)."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = fields.pop(0) if fields[0].startswith("@") else None
    if len(fields) < 3:
        return None
    try:
        blob = base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        return None
    return Entry(number, marker, fields[0], fields[1], blob)


def _glob(pattern: str, name: str) -> bool:
    # Not fnmatch: "[127.0.0.2]:2222" is a literal name, and fnmatch reads [...] as a class.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.IGNORECASE) is not None


def _hashed(pattern: str, name: str) -> bool:
    parts = pattern.split("|")   # "|1|salt|hash"
    try:
        salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (IndexError, binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)


def names_match(names: str, name: str) -> bool:
    """OpenSSH's rule: some pattern matches and no negated pattern does."""
    if names.startswith("|1|"):
        return _hashed(names, name)
    hit = False
    for pattern in names.split(","):
        if pattern.startswith("!"):
            if _glob(pattern[1:], name):
                return False
        elif _glob(pattern, name):
            hit = True
    return hit


class Verdict(enum.Enum):
    TRUSTED = "trusted"     # a plain line holds this very key
    UNKNOWN = "unknown"     # no line holds any key of this type for the host
    CHANGED = "changed"     # a plain line holds another key of the same type
    REVOKED = "revoked"     # an @revoked line holds this key


class OnChange(enum.Enum):
    REFUSE = "refuse"       # a different trusted key stays; the operator is told CHANGED
    REPLACE = "replace"     # the operator checked the new key and chose to replace the old one


class KnownHosts:
    def __init__(self, path: str, lines: list[str]) -> None:
        self.path = path
        self.lines = lines   # every line as read, newline included
        self.entries = [e for n, ln in enumerate(lines, 1) if (e := _parse(n, ln)) is not None]

    @classmethod
    def read(cls, path: str) -> "KnownHosts":
        full = os.path.expanduser(path)
        try:
            with open(full, encoding="utf-8", errors="surrogateescape", newline="") as fh:
                return cls(full, fh.readlines())
        except FileNotFoundError:
            return cls(full, [])
        except OSError as err:
            raise ConsoleError(f"cannot read {full}: {err.strerror or err}.",
                               "Check the known_hosts path and its permissions.") from None

    def trusted(self, name: str) -> list[Entry]:
        """Plain lines for ``name`` whose key is not revoked."""
        return [e for e in self.entries if e.marker is None and e.matches(name)
                and not self.revoked(name, e.blob)]

    def revoked(self, name: str, blob: bytes) -> list[Entry]:
        """The @revoked lines for ``name`` that hold this key."""
        return [e for e in self.entries if e.marker == "@revoked" and e.blob == blob and e.matches(name)]

    def check(self, name: str, key_type: str, blob: bytes) -> tuple[Verdict, list[Entry]]:
        """What known_hosts says of ``name`` offering this key, and the lines that say it."""
        if self.revoked(name, blob):
            return Verdict.REVOKED, self.revoked(name, blob)
        same_type = [e for e in self.trusted(name) if e.key_type == key_type]
        if any(e.blob == blob for e in same_type):
            return Verdict.TRUSTED, [e for e in same_type if e.blob == blob]
        return (Verdict.CHANGED, same_type) if same_type else (Verdict.UNKNOWN, [])

    def add(self, name: str, key_type: str, blob: bytes, *, on_change: OnChange) -> Verdict:
        """Trust this key for ``name``; returns what known_hosts said before. Writes the file."""
        verdict, found = self.check(name, key_type, blob)
        if verdict is Verdict.TRUSTED:
            return verdict
        if verdict is Verdict.REVOKED:
            raise HostKeyError(name, f"key {blob_fingerprint(blob)} is marked @revoked in {self.path} "
                               f"(line {found[0].number})", "Do not trust it; ask the host's owner.",
                               fingerprint=blob_fingerprint(blob), key_type=key_type)
        if verdict is Verdict.CHANGED:
            if on_change is not OnChange.REPLACE:
                raise changed_error(name, self.path, found, key_type, blob)
            self._drop(name, found)
        line = f"{name} {key_type} {base64.b64encode(blob).decode()}\n"
        if self.lines and not self.lines[-1].endswith("\n"):
            self.lines[-1] += "\n"
        self.lines.append(line)
        self.write()
        return verdict

    def _drop(self, name: str, found: list[Entry]) -> None:
        """Take ``name`` off the lines that trust its old key; other names on them stay."""
        for e in found:
            kept = [] if e.names.startswith("|1|") else [p for p in e.names.split(",") if p.lower() != name.lower()]
            if not e.names.startswith("|1|") and len(kept) == len(e.names.split(",")):
                raise ConsoleError(f"{self.path} line {e.number} matches {name} through the pattern "
                                   f"{e.names!r}.", "Edit that line by hand, then trust the host again.")
            text = self.lines[e.number - 1]
            self.lines[e.number - 1] = text.replace(e.names, ",".join(kept), 1) if kept else ""

    def write(self) -> None:
        """Atomic: a unique temporary file beside it, fsync, rename; mode 0600 like OpenSSH's."""
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".known_hosts.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as fh:
                fh.write("".join(self.lines))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except OSError as err:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise ConsoleError(f"cannot write {self.path}: {err.strerror or err}.",
                               "Check the folder's permissions and free space.") from None


def changed_error(label: str, path: str, found: list[Entry], key_type: str, blob: bytes, *,
                  port: int | None = None) -> HostKeyChanged:
    old = ", ".join(f"{e.fingerprint} (line {e.number})" for e in found)
    new = blob_fingerprint(blob)
    trust = f"tfconsole trust-host {label}" + (f" --port {port}" if port else "") + f" --fingerprint {new} --replace"
    return HostKeyChanged(
        label, f"host key CHANGED: {path} trusts {old}, the host now offers {key_type} {new}",
        "This can be an attack. Only if you know the host was reinstalled, check the new key on it "
        "(ssh-keygen -lf /etc/ssh/ssh_host_*.pub) with the host's admin, then replace the old one "
        f"explicitly (console: Cluster > Trust a host key), or: {trust}",
        fingerprint=new, key_type=key_type, known=tuple(e.fingerprint for e in found), trust=trust)
