"""Sign-in with the team's OpenID provider (issue 48, console/ui/signin.py), page by page per role.

The signed-in person is set AppTest-side with ``AppTest.user`` (Streamlit's harness for
``st.user``: the claims its cookie would hold after ``st.login``), so these tests cover what the
console does with a sign-in, not the provider's login form. The provider's discovery and token
endpoints are a small real HTTP server on loopback here, to make its answers (a wrong secret, a
dead URL) at will; the real ``oidc-provider`` and Chromium walking its login form are
tests/e2e/test_sign_in_browser.py."""
from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from streamlit.testing.v1 import AppTest

from backend.access import audit, identity
from backend.errors import ConsoleError
from backend.runs.store import RunStore
from tests.app.conftest import errors, local_rows
from tests.conftest import ROOT, wait_for
from rig.sshd import free_port

ROLES = "users:\n  alice@example.org: operator\n  bob@example.org: operator\ngroups:\n  watchers: viewer\n"


@pytest.fixture
def oidc(runs_dir, monkeypatch):
    """Sign-in on, a roles file, and this process's identity set back afterwards."""
    monkeypatch.setenv("TFCONSOLE_AUTH", "oidc")
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    runs_dir.mkdir(parents=True, exist_ok=True)
    (runs_dir / "roles.yaml").write_text(ROLES)
    yield runs_dir
    identity.set_resolver(None)
    identity._DEFAULT.clear()


def _provider(secret: str = "s3cret"):
    """Discovery and a token endpoint that refuses a wrong client secret as a provider does."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply(200, {"issuer": base, "authorization_endpoint": base + "/auth",
                              "token_endpoint": base + "/token", "jwks_uri": base + "/jwks"})

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            basic = base64.b64decode(self.headers.get("Authorization", "Basic ")[6:]).decode()
            right = f"client_secret={secret}" in body or basic.endswith(f":{secret}")
            self._reply(400 if right else 401, {"error": "unauthorized_client" if right else "invalid_client"})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, base + "/.well-known/openid-configuration"


def _auth(url: str, secret: str = "s3cret", **drop) -> dict:
    auth = {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": "c" * 32,
            "client_id": "tfconsole", "client_secret": secret, "server_metadata_url": url}
    return {k: v for k, v in auth.items() if k not in drop}


def _page(name: str, *, auth: dict | None, user: dict | None = None, **session) -> AppTest:
    at = AppTest.from_file(str(ROOT / ("console/app.py" if name == "app" else f"pages/{name}.py")),
                           default_timeout=120)
    if auth is not None:
        at.secrets["auth"] = auth
    at.user = user or {"is_logged_in": False}
    for key, value in session.items():
        at.session_state[key] = value
    return at.run()


def _user(email: str, **claims) -> dict:
    return {"is_logged_in": True, "email": email, "iat": time.time() - 60, "provider": "default", **claims}


def test_the_sign_in_page_says_which_setting_is_wrong(oidc):
    server, url = _provider()
    try:
        at = _page("app", auth=None)
        assert [t.value for t in at.title] == ["Sign-in is not set up"] and "[auth]" in errors(at)[0]
        at = _page("launch", auth=_auth(url, client_secret=None))
        assert "has no client_secret" in errors(at)[0], errors(at)
        at = _page("monitor", auth=_auth(f"http://127.0.0.1:{free_port()}/.well-known/openid-configuration"))
        assert [t.value for t in at.title] == ["The identity provider cannot be reached"]
        assert "server_metadata_url" in errors(at)[0] and "does not answer" in errors(at)[0]
        at = _page("runs", auth=_auth(url, secret="wrong"))
        assert "refuses this console's client_id or client_secret" in errors(at)[0]
        at = _page("app", auth=_auth(url))
        assert [t.value for t in at.title] == ["Sign in"] and not at.exception
        assert [b.label for b in at.button] == ["Sign in with default"]
        assert "Start" not in str(at._tree)
    finally:
        server.shutdown()


def _sleeping_run(root, owner: identity.Identity):
    from backend.config.spec import job_from_dict
    from backend.runs.launcher import Preflight, launch
    from console.forms import check_rows
    import sys
    cluster, _ = check_rows(local_rows())
    job = job_from_dict({"kind": "command", "command": [sys.executable, "-c", "import time; time.sleep(120)"]})
    with identity.acting_as(owner):
        return launch(cluster, job, store=RunStore(root), preflight=Preflight.SKIP)


def test_each_role_sees_what_it_may_do_and_acts_as_itself(oidc):
    """A viewer (by group) and another operator see the run and its owner but no Stop; a crafted
    stop as the viewer is refused and audited; the owner signed in stops it, audited as her."""
    alice = identity.Identity("alice@example.org", "console", "127.0.0.1", (), "default")
    run = _sleeping_run(oidc, alice)
    auth = _auth("http://127.0.0.1:9/unused")
    for who in (_user("carol@example.org", groups=["watchers"]), _user("bob@example.org")):
        at = _page("monitor", auth=auth, user=who, run_id=run.run_id)
        assert not at.exception and not [b for b in at.button if b.label == "Stop run"]
        assert any("No Stop for you here" in c.value for c in at.caption), [c.value for c in at.caption]
        assert any("No Dump stacks for you here" in c.value for c in at.caption), [c.value for c in at.caption]
        assert not [b for b in at.button if b.label == "Dump stacks"]
        assert [t.value for t in at.sidebar.text] == [who["email"]]
    viewer = identity.Identity("carol@example.org", "console", "127.0.0.1", ("watchers",), "default")
    with identity.acting_as(viewer), pytest.raises(ConsoleError, match="is a viewer"):
        run.stop(grace_s=1)
    at = _page("monitor", auth=auth, user=_user("alice@example.org"), run_id=run.run_id)
    assert [b for b in at.button if b.label == "Dump stacks"]   # her run: she may
    at.button(key="monitor_stop").click().run()
    at.button(key="monitor_yes").click().run()

    def lines():
        return [(e["who"].name, e["action"], e["outcome"][:7]) for e in audit.read(oidc)[0]]
    wait_for(lambda: ("alice@example.org", "stop", "ok") in lines(), 20, f"the owner's stop, audited as her {lines()}")
    assert ("carol@example.org", "stop", "refused") in lines(), lines()
    # From where: AppTest's browser is on loopback, which Streamlit does not name: "unknown",
    # never the console's own host name (which every person on loopback or a tunnel would share).
    assert {e["who"].host for e in audit.read(oidc)[0] if e["action"] == "stop" and e["who"].name == "alice@example.org"} == {"unknown"}
    assert not RunStore(oidc).load(run.run_id).live
    assert RunStore(oidc).load(run.run_id).owner["name"] == "alice@example.org"


def test_an_old_or_nameless_or_unruled_sign_in_may_do_nothing(oidc):
    auth = _auth("http://127.0.0.1:9/unused")
    at = _page("launch", auth=auth, user=_user("alice@example.org", iat=time.time() - 13 * 3600))
    assert [t.value for t in at.title] == ["Your sign-in has expired"]
    assert [b.label for b in at.button] == ["Sign in again"]
    at = _page("launch", auth=auth, user={"is_logged_in": True, "iat": time.time(), "name": "x"})
    assert [t.value for t in at.title] == ["Signed in, but not known"] and "email" in errors(at)[0]
    odd = "<b>eve</b>\x1b[31m@example.org"
    at = _page("launch", auth=auth, user=_user(odd), cluster_rows=local_rows())
    assert at.sidebar.text[0].value == odd   # drawn as text: never markup
    _nothing_but_no_access(at, "has no role")
    (oidc / "roles.yaml").unlink()   # signed in, and no roles file: nobody signed in may look
    at = _page("launch", auth=auth, user=_user("alice@example.org"), cluster_rows=local_rows())
    _nothing_but_no_access(at, "no roles file")


def _nothing_but_no_access(at: AppTest, says: str) -> None:
    """The page a person with no role gets: the title, why (ending with what to do), a Sign out,
    and nothing of the console: no button, table, chart, run or host."""
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Signed in, but no access"], [t.value for t in at.title]
    assert len(at.error) == 1 and says in errors(at)[0], errors(at)
    assert "Ask an admin" in errors(at)[0] or "roles.yaml" in errors(at)[0], errors(at)
    assert {b.label for b in at.button} == {"Sign out"}, [b.label for b in at.button]
    main = at.main   # (the sidebar names the person signed in, with its own Sign out)
    assert not main.dataframe and not main.get("plotly_chart") and not main.selectbox and not main.text_input
    assert not main.subheader and not main.caption and not main.code and not main.info and not main.warning


HOST_KEY = {"target": "gpu1", "host": "gpu1", "port": None, "label": "gpu1", "fingerprint": "SHA256:abc",
            "key_type": "ssh-ed25519", "verdict": "unknown", "error": ""}


def test_only_an_admin_is_offered_a_host_to_trust(oidc):
    """The Cluster page's Trust is for admins: an operator and a viewer see why, not the button."""
    from tests.app.conftest import table_rows
    rows = table_rows([{"role": "worker", "host": "gpu1", "ssh_port": 22, "tf_port": free_port(), "python": "python3"}])
    auth = _auth("http://127.0.0.1:9/unused")
    for email, claims in (("alice@example.org", {}), ("carol@example.org", {"groups": ["watchers"]})):
        at = _page("cluster", auth=auth, user=_user(email, **claims), host_key=HOST_KEY, cluster_rows=rows)
        assert not at.exception and not [b for b in at.button if b.key == "hostkey_trust"]
        assert any("No host trust for you here" in c.value and "is for admins" in c.value for c in at.caption)
    (oidc / "roles.yaml").write_text(ROLES + "  admins: admin\n")
    at = _page("cluster", auth=auth, user=_user("dana@example.org", groups=["admins"]), host_key=HOST_KEY, cluster_rows=rows)
    assert [b.label for b in at.button if b.key == "hostkey_trust"] == ["Trust gpu1 with this fingerprint"]


def test_a_downgraded_or_removed_person_loses_access_at_the_next_request(oidc):
    """The roles file is read at each request, not at the console's start: the same session,
    unchanged, is an operator, then a viewer, then nobody."""
    auth = _auth("http://127.0.0.1:9/unused")
    at = _page("launch", auth=auth, user=_user("bob@example.org"), cluster_rows=local_rows())
    assert not at.button(key="start_button").disabled
    (oidc / "roles.yaml").write_text(ROLES.replace("bob@example.org: operator", "bob@example.org: viewer"))
    at.run()
    assert at.button(key="start_button").disabled and "is a viewer" in at.button(key="start_button").help
    (oidc / "roles.yaml").write_text(ROLES.replace("  bob@example.org: operator\n", ""))
    at.run()
    _nothing_but_no_access(at, "has no role")
    bob = identity.Identity("bob@example.org", "console", "127.0.0.1", (), "default")
    with identity.acting_as(bob), pytest.raises(ConsoleError, match="has no role"):
        audit.allowed(oidc, "launch")   # and the backend says the same at the action


def test_a_sign_in_older_than_the_roles_files_session_hours_is_asked_again(oidc):
    auth = _auth("http://127.0.0.1:9/unused")
    (oidc / "roles.yaml").write_text(ROLES + "session_hours: 1\n")
    at = _page("launch", auth=auth, user=_user("alice@example.org", iat=time.time() - 2 * 3600))
    assert [t.value for t in at.title] == ["Your sign-in has expired"]
    assert "last 1 hours" in at.info[0].value
    at = _page("launch", auth=auth, user=_user("alice@example.org", iat=time.time() - 1800))
    assert [t.value for t in at.title] != ["Your sign-in has expired"] and not at.exception


@pytest.mark.parametrize("text, says", [
    ("users:\n  alice@example.org: superuser\n", "users.alice@example.org: unknown role 'superuser'"),
    ("users:\n  alice@example.org: operator\n bob: [\n", "is not YAML line"),
    ("users: alice@example.org\n", "users must be a mapping of name: role"),
])
def test_a_bad_roles_file_lets_nobody_act_and_says_what_to_fix(oidc, text, says):
    """Never access by default: every button says what is wrong with the file; no traceback."""
    (oidc / "roles.yaml").write_text(text)
    auth = _auth("http://127.0.0.1:9/unused")
    at = _page("launch", auth=auth, user=_user("alice@example.org"), cluster_rows=local_rows())
    _nothing_but_no_access(at, says)
    assert "roles.yaml" in errors(at)[0]
    alice = identity.Identity("alice@example.org", "console", "127.0.0.1", (), "default")
    with identity.acting_as(alice), pytest.raises(ConsoleError, match="roles.yaml"):
        audit.allowed(oidc, "launch")


def test_every_page_draws_for_each_role_without_an_error(oidc):
    """Each page, for a viewer, an operator and an admin signed in: drawn whole, the person named
    in the sidebar; Start is offered to the operator and the admin, not to the viewer."""
    (oidc / "roles.yaml").write_text(ROLES + "  admins: admin\n")
    auth = _auth("http://127.0.0.1:9/unused")
    people = {"viewer": _user("carol@example.org", groups=["watchers"]), "operator": _user("bob@example.org"),
              "admin": _user("dana@example.org", groups=["admins"])}
    for role, who in people.items():
        for name in ("launch", "monitor", "checkpoints", "cluster", "runs", "audit"):
            at = _page(name, auth=auth, user=who, cluster_rows=local_rows())
            assert not at.exception and not errors(at), (role, name, errors(at))
            assert [t.value for t in at.sidebar.text] == [who["email"]], (role, name)
            if name == "launch":
                assert at.button(key="start_button").disabled == (role == "viewer"), role


PAGES = ("app", "launch", "monitor", "checkpoints", "cluster", "runs", "sweep", "audit")


def test_a_person_with_no_role_sees_nothing_on_any_page_nor_through_the_readers(oidc):
    """A security defect of round four: signed in with no role (the roles file names them
    nowhere, no default:), a person saw the live run, its tasks, every chart, the runs and the
    audit. Now every page, by any URL, is the no-access page alone, and the readers behind the
    pages refuse the same person, so a page added later cannot show them a run either."""
    from backend.access.roles import AccessDenied
    from backend.sweeps import control
    alice = identity.Identity("alice@example.org", "console", "127.0.0.1", (), "default")
    run = _sleeping_run(oidc, alice)
    try:
        auth = _auth("http://127.0.0.1:9/unused")
        for name in PAGES:
            at = _page(name, auth=auth, user=_user("mallory@example.org"), run_id=run.run_id,
                       cluster_rows=local_rows())
            _nothing_but_no_access(at, "has no role")
            assert run.run_id not in str(at._tree) and "alice" not in str(at._tree), name
        mallory = identity.Identity("mallory@example.org", "console", "unknown", (), "default")
        identity.set_resolver(lambda: mallory)   # as a page served to her would ask
        for read in (lambda: RunStore(oidc).list(), lambda: RunStore(oidc).load(run.run_id),
                     lambda: audit.read(oidc), lambda: control.list_sweeps(oidc)):
            with pytest.raises(AccessDenied, match="has no role"):
                read()
        identity.set_resolver(None)   # outside of a page (the CLI, a keeper): the OS user's own rights
        assert [s.run_id for s in RunStore(oidc).list()] == [run.run_id]
        at = _page("runs", auth=auth, user=_user("carol@example.org", groups=["watchers"]))
        assert not at.exception and run.run_id in str(at._tree)   # a viewer does see it
    finally:
        with identity.acting_as(alice):
            run.stop(grace_s=1)


def test_sign_in_asks_the_provider_again_when_clicked(oidc):
    """The page was drawn while the provider answered; it went down before the click. The click
    asks again (uncached) and the page names the problem, not Streamlit's bare "Authentication
    error"."""
    server, url = _provider()
    at = _page("app", auth=_auth(url))
    assert [b.label for b in at.button] == ["Sign in with default"]
    server.shutdown()
    server.server_close()
    at.button[0].click().run()   # within the 10 s the first answer is remembered
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["The identity provider cannot be reached"]
    assert "does not answer" in errors(at)[0] and "server_metadata_url" in errors(at)[0]
