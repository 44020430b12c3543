"""Sign-in through a real OpenID provider in real Chromium (issue 48): panva's ``oidc-provider``
on loopback (tests/oidc, installed by ``make test``), its own login form, Streamlit's ``st.login``
and ``st.logout``. An operator signs in, starts a run and stops it; a viewer signs in and sees the
run but no Stop, and her hand-made stop (the backend action the Stop button calls, as her) is
refused and recorded; sign-out ends the session; a forged cookie and an expired one let nobody
in; the audit names each person and each outcome. One console, one browser, three contexts."""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from backend.access import audit, identity, roles
from backend.runs.launcher import attach
from backend.runs.store import RunStore
from tests.conftest import ROOT, require, wait_for
from tests.e2e import browser as web
from rig.sshd import free_port

OIDC = ROOT / "tests" / "oidc"
SIGNED_IN = ["-m", "console", "--address", "127.0.0.1", "--auth-file"]
SLEEP = f"{sys.executable} -c 'import time; time.sleep(300)'"
COOKIE_SECRET = "c" * 32
USER_COOKIE = "_streamlit_user"   # Streamlit's signed cookie holding the ID token's claims


@contextlib.contextmanager
def provider(console_url: str):
    require("node (Debian package nodejs)", shutil.which("node") is not None)
    require("oidc-provider (npm, make test installs it in tests/oidc)", (OIDC / "node_modules" / "oidc-provider").exists())
    port = free_port()
    metadata = f"http://127.0.0.1:{port}/.well-known/openid-configuration"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(["node", str(OIDC / "provider.mjs"), str(port), console_url],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: proc.poll() is not None or _answers(metadata), 30, "the OpenID provider to answer")
            log.seek(0)
            assert proc.poll() is None, "the OpenID provider exited: " + log.read()[-2000:].decode(errors="replace")
            yield metadata
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def _sign_in(page, url: str, login: str) -> None:
    page.goto(url)
    web.click(page, "Sign in with default", 60)
    page.locator('input[name="login"]').fill(login, timeout=30_000)   # the provider's own form
    page.locator('input[name="password"]').fill("any")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click(timeout=30_000)   # its consent screen
    page.get_by_role("heading", name="Launch").first.wait_for(timeout=60_000)
    web.wait_text(page, rf"{login}@example\.org", 30)


def test_an_operator_starts_and_stops_a_viewer_only_looks_through_a_real_provider(tmp_path, monkeypatch):
    sync_playwright = web.playwright()
    port = free_port()
    monkeypatch.setattr(web, "free_port", lambda: port)   # the console's redirect_uri names its port
    console_url = f"http://127.0.0.1:{port}"
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "roles.yaml").write_text("groups:\n  ml-team: operator\n  watchers: viewer\n")
    secrets = tmp_path / "secrets.toml"
    with provider(console_url) as metadata:
        secrets.write_text(f'[auth]\nredirect_uri = "{console_url}/oauth2callback"\ncookie_secret = "{COOKIE_SECRET}"\n'
                           f'client_id = "tfconsole"\nclient_secret = "s3cret"\nserver_metadata_url = "{metadata}"\n'
                           # oidc-provider knows login and consent, not Streamlit's default select_account
                           '[auth.client_kwargs]\nprompt = "login"\n')
        with web.console(SIGNED_IN + [str(secrets), "--port"], tmp_path) as served, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=web.CHROMIUM, args=web.ARGS)
            alice = browser.new_context(viewport={"width": 1400, "height": 1200}).new_page()
            _sign_in(alice, served.url, "alice")
            run_id = web.start_command(alice, SLEEP)
            assert RunStore(served.runs).load(run_id).owner["name"] == "alice@example.org"

            carol = browser.new_context(viewport={"width": 1400, "height": 1200}).new_page()
            _sign_in(carol, served.url, "carol")
            web.goto(carol, "Monitor")
            web.wait_text(carol, r"No Stop for you here: carol@example\.org .* is a viewer", 60)
            assert web.button(carol, "Stop run").count() == 0
            # A hand-made stop: the action the Stop button calls, taken as the console takes it for her.
            carol_id = identity.Identity("carol@example.org", "console", "127.0.0.1", ("watchers",), "default")
            with identity.acting_as(carol_id), pytest.raises(roles.AccessDenied, match="viewer"):
                attach(run_id, store=RunStore(served.runs)).stop(grace_s=3)
            assert RunStore(served.runs).load(run_id).live
            cookie = next(c for c in carol.context.cookies() if c["name"] == USER_COOKIE)
            web.click(carol, "Sign out")   # st.logout: the console forgets her, then the provider asks
            carol.get_by_role("button", name="Yes, sign me out").click(timeout=60_000)
            carol.get_by_role("button", name="Sign in with default").wait_for(timeout=60_000)
            assert not any(c["name"] == USER_COOKIE for c in carol.context.cookies())

            claims = json.loads(_unsign(COOKIE_SECRET, cookie["value"]))
            for secret, changes, shown in [
                    ("not-the-secret" * 3, {"email": "alice@example.org", "groups": ["ml-team"]}, "Sign in with default"),
                    (COOKIE_SECRET, {"iat": claims["iat"] - 13 * 3600}, "Your sign-in has expired")]:
                forged = browser.new_context()
                forged.add_cookies([{**cookie, "value": _sign(secret, json.dumps({**claims, **changes}))}])
                page = forged.new_page()
                page.goto(served.url)
                page.get_by_text(shown).first.wait_for(timeout=60_000)
                assert page.get_by_text("Launch").count() == 0   # no page list: nothing past the gate
                forged.close()

            web.goto(alice, "Monitor")
            web.click(alice, "Stop run", 60)
            web.click(alice, "Yes, stop it", 60)
            web.wait_text(alice, rf"Stopped {run_id}", 120)
            browser.close()
        done = [(e["who"].name, e["action"], e["outcome"]) for e in audit.read(served.runs)[0]]
        assert done == [("alice@example.org", "launch", "ok"),
                        ("carol@example.org", "stop", "refused: carol@example.org (console on 127.0.0.1) is a "
                                                      "viewer: stop is for operators and admins"),
                        ("alice@example.org", "stop", "ok")], done


def _unsign(secret: str, value: str) -> str:
    from streamlit.web.server.starlette.starlette_app_utils import decode_signed_value
    found = decode_signed_value(secret, USER_COOKIE, value)
    assert found is not None, "Streamlit's cookie format changed: this test signs cookies as it does"
    return found.decode()


def _sign(secret: str, value: str) -> str:
    from streamlit.web.server.starlette.starlette_app_utils import create_signed_value
    return create_signed_value(secret, USER_COOKIE, value).decode()


def test_the_real_provider_tells_a_wrong_client_secret_and_a_wrong_url_from_right_ones():
    """What the sign-in page checks before anyone signs in (console/signin.provider_problem), asked
    of the real provider rather than a stand-in: its answers decide the page's message."""
    from console import signin
    with provider("http://127.0.0.1:9") as metadata:
        def problem(**changes):
            auth = {"redirect_uri": "http://127.0.0.1:9/oauth2callback", "cookie_secret": COOKIE_SECRET,
                    "client_id": "tfconsole", "client_secret": "s3cret", "server_metadata_url": metadata}
            return signin.provider_problem(signin.settings({**auth, **changes}, "secrets.toml"))
        assert problem() is None
        assert "refuses this console's client_id or client_secret (in secrets.toml)" in problem(client_secret="wrong")
        assert "refuses this console's client_id" in problem(client_id="nobody")
        wrong = problem(server_metadata_url=metadata.replace("openid-configuration", "nothing-here"))
        assert wrong.startswith("The identity provider does not answer at server_metadata_url"), wrong
