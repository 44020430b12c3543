"""DNS rebinding in a real browser (issue 27): with the token off (behind an SSH tunnel), a page
whose own name resolves to 127.0.0.1 opens the console under that name and must be refused."""
from __future__ import annotations

from console import tokens
from rig import browser as chromium
from tests.e2e import browser as web

MAKE_RUN = ["-m", "console", "--address", "127.0.0.1", "--port"]


def test_a_rebound_name_is_refused_and_the_real_address_opens(tmp_path, monkeypatch):
    sync_playwright = web.playwright()
    monkeypatch.setenv(tokens.ENV, "none")
    monkeypatch.delenv(tokens.HOSTS_ENV, raising=False)
    with web.console(MAKE_RUN, tmp_path) as served, sync_playwright() as p:
        port = served.url.rsplit(":", 1)[1]
        # What rebinding achieves: the browser resolves the attacker's name to 127.0.0.1.
        browser = p.chromium.launch(executable_path=chromium.CHROMIUM, args=chromium.ARGS + [
            "--host-resolver-rules=MAP attacker.example 127.0.0.1"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"http://attacker.example:{port}/")
        try:
            page.get_by_role("heading", name="Wrong address").wait_for(timeout=60_000)
        except Exception:  # noqa: BLE001 - say what the page showed instead
            web.fail(page, "no refusal for a rebound name after 60 s")
        body = page.inner_text("body")
        assert "attacker.example" in body and tokens.HOSTS_ENV in body, body
        assert page.locator('[data-testid="stSidebarNav"]').count() == 0, body
        assert "Start" not in body and "TF_CONFIG" not in body, body
        page.goto(served.url)               # the address it serves on still opens
        page.get_by_role("heading", name="Launch").first.wait_for(timeout=60_000)
        browser.close()
