"""backend.hosts.known_hosts: OpenSSH's known_hosts format read and written without losing a line."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
import struct

import pytest

from backend.errors import ConsoleError, HostKeyError
from backend.hosts.known_hosts import KnownHosts, OnChange, Verdict, blob_fingerprint, names_match


def _string(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def ed25519_blob(seed: int) -> bytes:
    return _string(b"ssh-ed25519") + _string(hashlib.sha256(bytes([seed])).digest())


def sk_blob() -> bytes:
    # The public half of an sk-ssh-ed25519@openssh.com key (PROTOCOL.u2f): type, key, application.
    return _string(b"sk-ssh-ed25519@openssh.com") + _string(bytes(32)) + _string(b"ssh:")


def b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode()


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{b64(salt)}|{b64(digest)}"


A, B, CA, OLD = (ed25519_blob(n) for n in (1, 2, 3, 4))
TEXT = (
    "# the operator's notes stay\n"
    "\n"
    f"@cert-authority *.example.org ssh-ed25519 {b64(CA)} cluster CA\n"
    f"@revoked * ssh-ed25519 {b64(OLD)}\n"
    f"{hashed('[10.0.0.7]:2222')} ssh-ed25519 {b64(A)}\n"
    f"[gpu1]:2222,gpu1-alt sk-ssh-ed25519@openssh.com {b64(sk_blob())} security key\n"
    f"node*,!node9 ssh-ed25519 {b64(B)}\n"
    "this line means nothing to us\n"
    f"oldhost ssh-ed25519 {b64(OLD)}\n"
    "lastline-without-newline ssh-ed25519 AAAA")


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "known_hosts"
    p.write_text(TEXT)
    return p


def test_hashed_names_and_patterns_match_as_openssh_does():
    assert names_match(hashed("[10.0.0.7]:2222"), "[10.0.0.7]:2222")
    assert not names_match(hashed("[10.0.0.7]:2222"), "10.0.0.7")
    assert names_match("node*,!node9", "node3") and not names_match("node*,!node9", "node9")
    # Brackets are literal, not a character class.
    assert names_match("[h]:22", "[h]:22") and not names_match("[h]:22", "h:22")


def test_check_reads_every_kind_of_line(path):
    kh = KnownHosts.read(str(path))
    assert kh.check("[10.0.0.7]:2222", "ssh-ed25519", A)[0] is Verdict.TRUSTED       # hashed line
    assert kh.check("node3", "ssh-ed25519", B)[0] is Verdict.TRUSTED                  # pattern
    assert kh.check("node9", "ssh-ed25519", B)[0] is Verdict.UNKNOWN                  # negated
    assert kh.check("[gpu1]:2222", "sk-ssh-ed25519@openssh.com", sk_blob())[0] is Verdict.TRUSTED
    # A CA key trusts certificates, never itself as a plain host key.
    assert kh.check("a.example.org", "ssh-ed25519", CA)[0] is Verdict.UNKNOWN
    # A revoked key is refused even where a plain line trusts it.
    verdict, lines = kh.check("oldhost", "ssh-ed25519", OLD)
    assert verdict is Verdict.REVOKED and lines[0].number == 4
    verdict, lines = kh.check("node3", "ssh-ed25519", A)
    assert verdict is Verdict.CHANGED and lines[0].fingerprint == blob_fingerprint(B)


def test_adding_keeps_every_line_and_writes_0600(path):
    os.chmod(path, 0o644)
    kh = KnownHosts.read(str(path))
    assert kh.add("[10.0.0.8]:2222", "ssh-ed25519", B, on_change=OnChange.REFUSE) is Verdict.UNKNOWN
    text = path.read_text()
    assert text.startswith(TEXT + "\n")   # byte for byte, the unterminated last line ended
    assert text.endswith(f"[10.0.0.8]:2222 ssh-ed25519 {b64(B)}\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["known_hosts"]   # no temporary file left
    assert KnownHosts.read(str(path)).check("[10.0.0.8]:2222", "ssh-ed25519", B)[0] is Verdict.TRUSTED


def test_trusting_again_changes_nothing(path):
    KnownHosts.read(str(path)).add("[10.0.0.7]:2222", "ssh-ed25519", A, on_change=OnChange.REFUSE)
    assert path.read_text() == TEXT


def test_a_changed_key_is_refused_with_both_fingerprints(path):
    new = ed25519_blob(9)
    text = TEXT + "\nh2 ssh-ed25519 " + b64(A) + "\n"
    path.write_text(text)
    with pytest.raises(HostKeyError, match="CHANGED") as err:
        KnownHosts.read(str(path)).add("h2", "ssh-ed25519", new, on_change=OnChange.REFUSE)
    assert blob_fingerprint(A) in str(err.value) and blob_fingerprint(new) in str(err.value)
    assert "--replace" in str(err.value)
    assert path.read_text() == text


def test_replace_takes_only_that_host_off_the_old_line(path):
    new = ed25519_blob(9)
    path.write_text(TEXT + f"\nh2,h2-other ssh-ed25519 {b64(A)}\n{hashed('h3')} ssh-ed25519 {b64(A)}\n")
    kh = KnownHosts.read(str(path))
    kh.add("h2", "ssh-ed25519", new, on_change=OnChange.REPLACE)
    kh.add("h3", "ssh-ed25519", new, on_change=OnChange.REPLACE)
    after = KnownHosts.read(str(path))
    assert after.check("h2", "ssh-ed25519", new)[0] is Verdict.TRUSTED
    assert after.check("h2-other", "ssh-ed25519", A)[0] is Verdict.TRUSTED   # still trusted
    assert after.check("h3", "ssh-ed25519", new)[0] is Verdict.TRUSTED
    assert path.read_text().startswith(TEXT)


def test_a_pattern_line_is_never_rewritten(path):
    with pytest.raises(ConsoleError, match="pattern"):
        KnownHosts.read(str(path)).add("node3", "ssh-ed25519", A, on_change=OnChange.REPLACE)
    assert path.read_text() == TEXT


def test_a_revoked_key_cannot_be_trusted(path):
    with pytest.raises(HostKeyError, match="revoked"):
        KnownHosts.read(str(path)).add("newhost", "ssh-ed25519", OLD, on_change=OnChange.REPLACE)


def test_missing_file_is_empty_and_created_private(tmp_path):
    path = tmp_path / "new" / "known_hosts"
    KnownHosts.read(str(path)).add("h", "ssh-ed25519", A, on_change=OnChange.REFUSE)
    assert path.read_text() == f"h ssh-ed25519 {b64(A)}\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
