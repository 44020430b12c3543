"""Audit: who launched, stopped, saved, exported or restored which run, and when;
the same lines as `tfconsole audit`, newest first, filtered by run, person or action."""
import pandas as pd
import streamlit as st

from console import audit_view
from console.ui import page, state


def main() -> None:
    ss = page.open_page("Audit")
    if ss is None:
        return
    root = state.run_store().root
    found = audit_view.choices(root)
    run_col, user_col, action_col = st.columns(3)
    run = run_col.selectbox("Run", [""] + found["run"], key="audit_run", format_func=lambda v: v or "every run")
    user = user_col.selectbox("Who", [""] + found["user"], key="audit_user", format_func=lambda v: v or "everyone")
    action = action_col.selectbox("Action", [""] + found["action"], key="audit_action",
                                  format_func=lambda v: v or "every action")
    rows, skipped = audit_view.audit_rows(root, run=run, user=user, action=action)
    if skipped:
        st.warning(f"{len(skipped)} damaged line(s) in the audit were skipped: " + "; ".join(skipped[:5]))
    if not rows:
        st.info("No action recorded yet" + (" that matches" if run or user or action else "") + ".")
        return
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="audit_table")   # text, not Markdown
    st.caption(f"{len(rows)} line(s) from {root / 'audit.jsonl'}; `tfconsole audit --json` gives the same.")


main()
