"""The entry script: navigation over the five pages, Launch first."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.conftest import as_owner
from tests.conftest import ROOT


def test_app_opens_on_the_launch_page(runs_dir):
    at = as_owner(AppTest.from_file(str(ROOT / "console" / "app.py"), default_timeout=60)).run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Launch"]
    assert any("No run yet" in i.value for i in at.info)
