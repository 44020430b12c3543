"""What sign-in adds to a page load (issue 48): the Runs page drawn by Streamlit's AppTest, with
the login token (the default) and signed in with an OpenID provider (``TFCONSOLE_AUTH=oidc``, the
person set AppTest-side as ``st.user``), alternately, in one process. Signed in, each load reads
the ``[auth]`` settings and the roles file (the sign-in's age) and draws the name and Sign out.
The provider itself is not asked once a person is signed in (only the sign-in page asks it).
``--provider``: also what that first ask costs (discovery, then the token endpoint with the
client's id and secret, ``console.signin``) against the real ``oidc-provider`` of the tests on
loopback (``make test`` installs it in tests/oidc), uncached.

    .venv/bin/python bench/sign_in_page.py [--loads 20] [--provider]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load(signed_in: bool) -> float:
    from streamlit.testing.v1 import AppTest
    from console import tokens
    from console.ui import auth
    os.environ[tokens.ENV] = "oidc" if signed_in else "token"
    at = AppTest.from_file(str(ROOT / "pages" / "runs.py"), default_timeout=60)
    if signed_in:
        at.secrets["auth"] = {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": "c" * 32,
                              "client_id": "tfconsole", "client_secret": "s", "server_metadata_url": "http://127.0.0.1:9/x"}
        at.user = {"is_logged_in": True, "email": "ann@example.org", "iat": time.time(), "provider": "default"}
    else:
        at.session_state[auth.SESSION_KEY] = tokens.read_token(tokens.token_path())
    start = time.perf_counter()
    at.run()
    took = (time.perf_counter() - start) * 1000
    assert not at.exception and [t.value for t in at.title] == ["Runs"], [t.value for t in at.title]
    return took


def provider_ask(times: int) -> list[float]:
    """Milliseconds of each of ``times`` uncached checks of the provider the sign-in page makes."""
    from console import signin
    from tests.e2e.test_sign_in_browser import COOKIE_SECRET, provider
    with provider("http://127.0.0.1:9") as metadata:
        found = signin.settings({"redirect_uri": "http://127.0.0.1:9/oauth2callback", "cookie_secret": COOKIE_SECRET,
                                 "client_id": "tfconsole", "client_secret": "s3cret",
                                 "server_metadata_url": metadata}, "bench")
        assert signin._ask(found) is None   # warm: the provider's first answers compile its routes
        took = []
        for _ in range(times):
            start = time.perf_counter()
            assert signin._ask(found) is None
            took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loads", type=int, default=20)
    p.add_argument("--provider", action="store_true", help="also time the sign-in page's check of a real provider")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TFCONSOLE_RUNS"] = str(Path(tmp) / "runs")
        (Path(tmp) / "runs").mkdir()
        (Path(tmp) / "runs" / "roles.yaml").write_text("users:\n  ann@example.org: operator\n")
        load(False), load(True)   # imports and first compilations out of the figures
        token, oidc = [], []
        for _ in range(a.loads):
            token.append(load(False))
            oidc.append(load(True))
    print(f"{a.loads} loads each of the Runs page; milliseconds (median / max)")
    for name, values in (("login token", token), ("signed in (OIDC)", oidc)):
        print(f"{name:>18}: {statistics.median(values):7.1f} / {max(values):7.1f}")
    print(f"sign-in adds {statistics.median(oidc) - statistics.median(token):+.1f} ms a page load (median)")
    if a.provider:
        asked = provider_ask(a.loads)
        print(f"the sign-in page's provider check (oidc-provider on loopback, uncached): "
              f"{statistics.median(asked):.1f} / {max(asked):.1f} ms (median / max)")


if __name__ == "__main__":
    main()
