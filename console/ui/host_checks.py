"""The Cluster and Launch pages' host checks drawn: the preflight table and a host key to trust."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.hosts.known_hosts import OnChange, Verdict
from backend.hosts.ssh import SSHOptions
from backend.runs.store import default_root
from console import access_view
from console.cluster_actions import trust
from console.markdown_safe import md_escape
from console.ui.widgets import action_button


def _cell_style(value) -> str:
    text = str(value)
    if text.startswith("ok"):
        return "background-color: #d4f7dc"
    if text.startswith("FAIL"):
        return "background-color: #ffd6d6"
    return ""


def show_preflight(result: dict) -> None:
    if result["error"]:
        st.error(md_escape(result["error"]))   # hosts' output: text, not Markdown
        return
    frame = pd.DataFrame(result["rows"])
    st.dataframe(frame.style.map(_cell_style), hide_index=True, width="stretch",
                 key="preflight_table")
    for line in result["failures"]:
        st.error(md_escape(line))
    for line in result.get("spare_failures", ()):
        st.warning(md_escape(line))
    if not result["failures"]:
        st.success("Every host passed the preflight." if not result.get("spare_failures")
                   else "Every task's host passed the preflight.")


def show_host_key(info: dict | None, options: SSHOptions) -> None:
    if not info:
        return
    if info["error"]:
        st.error(md_escape(info["error"]))
        return
    st.code(f"{info['label']} offers {info['key_type']} {info['fingerprint']}", language=None)
    verdict = Verdict(info["verdict"])
    if verdict is Verdict.TRUSTED:
        st.success(f"Already trusted in {options.known_hosts}.")
        return
    on_change = OnChange.REFUSE
    if verdict is Verdict.CHANGED:
        st.error("CHANGED: known_hosts trusts a different key for this host. This can be an attack. "
                 "Replace it only if you know the host was reinstalled and its new key is the one above.")
        on_change = OnChange.REPLACE
    st.caption("Compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*.pub) before trusting.")
    label = "Replace the old key with this one" if verdict is Verdict.CHANGED else \
        f"Trust {info['target']} with this fingerprint"
    refused = access_view.refusal(default_root(), "trust_host")
    if refused:   # admins only: no button for anyone else; the backend refuses it too
        st.caption(md_escape(f"No host trust for you here: {refused}"))
        return
    # What it says shows under "Fetch host key": once trusted, this key and its button are gone.
    action_button(label, "hostkey_trust", _trust, info, options, on_change, said_at="hostkey_fetch",
                  type="primary")


def _trust(info: dict, options: SSHOptions, on_change: OnChange) -> str:
    trust(info, options, on_change=on_change)
    st.session_state.host_key = None
    return f"Trusted {info['label']} ({info['fingerprint']}) in {options.known_hosts}."
