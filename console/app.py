"""Entry point: ``streamlit run console/app.py``. Navigation over the pages in ../pages."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:   # `streamlit run console/app.py` puts only console/ on the path
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from console.paths import PAGES  # noqa: E402
from console.ui import auth, run_toast, state  # noqa: E402

st.set_page_config(page_title="TF training console", page_icon=":material/monitoring:", layout="wide")
if auth.gate():   # st.navigation runs this script on every rerun: nothing below without the token
    state.init()
    nav = st.navigation([
        st.Page(str(PAGES / "launch.py"), title="Launch", icon=":material/rocket_launch:", url_path="launch", default=True),
        st.Page(str(PAGES / "monitor.py"), title="Monitor", icon=":material/monitoring:", url_path="monitor"),
        st.Page(str(PAGES / "checkpoints.py"), title="Checkpoints", icon=":material/save:", url_path="checkpoints"),
        st.Page(str(PAGES / "cluster.py"), title="Cluster", icon=":material/hub:", url_path="cluster"),
        st.Page(str(PAGES / "runs.py"), title="Runs", icon=":material/history:", url_path="runs"),
        st.Page(str(PAGES / "sweep.py"), title="Sweep", icon=":material/tune:", url_path="sweep"),
        st.Page(str(PAGES / "audit.py"), title="Audit", icon=":material/policy:", url_path="audit"),
    ])
    with st.sidebar:
        run_toast.watch()   # a toast when the current run ends, fails or restarts, on any page
    if nav.url_path != "checkpoints":
        state.release_pending_restore()   # the operator left a Restore unanswered: no hold leaks
    nav.run()
