"""Sign-in settings and claims (console/signin.py, issue 48): a console started with sign-in
settings that cannot work refuses to start naming the setting; claims make an identity, or say
which claim is missing; a signed-in person without a roles file may do nothing."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from backend.access import roles
from backend.errors import SpecError
from console import signin
from tests.conftest import ROOT


def test_the_console_will_not_start_with_sign_in_settings_that_cannot_work(tmp_path):
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[auth]\nredirect_uri = "http://127.0.0.1:8501/"\ncookie_secret = "x"\n')
    for text, said in (("[auth\n", "is not TOML"),
                       (secrets.read_text(), "redirect_uri"),
                       (secrets.read_text().replace('8501/"', '8501/oauth2callback"'), "has no client_id")):
        secrets.write_text(text)
        out = subprocess.run([sys.executable, "-m", "console", "--auth-file", str(secrets), "--port", "1"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_claims_make_an_identity_or_say_what_is_missing():
    who = signin.identity_of({"email": " ann@example.org ", "groups": ["ml"], "provider": "okta"}, "10.0.0.5")
    assert (who.name, who.via, who.host, who.groups, who.provider) == ("ann@example.org", "console", "10.0.0.5", ("ml",), "okta")
    with pytest.raises(signin.SignInError, match="no email claim.*'email' scope"):
        signin.identity_of({"name": "Ann"}, "h")
    now = time.time()
    assert not signin.too_old({"iat": now - 3600}, 12, now=now)
    assert signin.too_old({"iat": now - 13 * 3600}, 12, now=now) and signin.too_old({}, 12, now=now)
    with pytest.raises(roles.AccessDenied, match="no roles file"):
        roles.check(None, who, "launch")


def test_session_hours_come_from_the_roles_file(tmp_path, monkeypatch):
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    (tmp_path / roles.FILE).write_text("users: {a: admin}\nsession_hours: 2\n")
    assert roles.load(tmp_path).session_hours == 2
    (tmp_path / roles.FILE).write_text("users: {a: admin}\nsession_hours: never\n")
    with pytest.raises(SpecError, match="session_hours"):
        roles.load(tmp_path)


@pytest.mark.parametrize("ip, headers, proxy, where", [
    ("203.0.113.7", {}, None, "203.0.113.7"),                      # Streamlit names a remote browser
    (None, {}, None, "unknown"),                                   # loopback: this machine, a tunnel
    (None, {"X-Forwarded-For": "198.51.100.2"}, None, "unknown"),  # a header nobody said to trust
    (None, {"X-Forwarded-For": "10.0.0.9, 198.51.100.2"}, "X-Forwarded-For", "198.51.100.2"),
    (None, {"X-Real-IP": "2001:db8::1"}, "X-Real-IP", "2001:db8::1"),
    (None, {"X-Forwarded-For": "not-an-address"}, "X-Forwarded-For", "unknown"),
    ("203.0.113.7", {"X-Forwarded-For": "198.51.100.2"}, "X-Forwarded-For", "203.0.113.7"),  # not via the proxy
])
def test_where_a_person_is_comes_from_the_browser_or_a_trusted_proxy_never_the_console(ip, headers, proxy, where):
    import socket
    found = signin.where_from(ip, headers, proxy_header=proxy)
    assert found == where and found != socket.gethostname()
