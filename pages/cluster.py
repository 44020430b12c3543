"""Cluster: the tasks that will train, their checks, TF_CONFIG, preflight and host keys."""
import json

import pandas as pd
import streamlit as st

from console import cluster_actions, forms, slurm_form
from console.ui import auth, host_checks, slurm_view, state
from console.errors import ConsoleError, messages

auth.guard()   # nothing on this page for a session without the login token
state.init()
ss = st.session_state
st.title("Cluster")
ss.cluster_kind = st.radio("Tasks run on", slurm_form.KINDS, index=slurm_form.KINDS.index(ss.cluster_kind),
                           horizontal=True, key="cluster_kind_choice")
if ss.cluster_kind == "Slurm":   # Slurm starts the tasks: a form instead of the table (docs/slurm.md)
    slurm_view.show_form()
    st.stop()

# The editor's widget state is dropped while another page shows: start again from the last edit.
editor_key = f"cluster_editor_{ss.cluster_version}"
if ss.cluster_current is not None and editor_key not in ss and ss.cluster_current != ss.cluster_rows:
    state.set_cluster_rows(ss.cluster_current)
    editor_key = f"cluster_editor_{ss.cluster_version}"


def _import(build) -> None:
    """Run an import (a function returning table rows); on success replace the table, else
    show each problem."""
    try:
        state.set_cluster_rows(build())
        st.success("Imported. Check the table below.")
    except ConsoleError as err:
        for message in messages(err):
            st.error(message)


with st.expander("Import tasks", expanded=False):
    yaml_tab, hostfile_tab, ssh_tab = st.tabs(["YAML file", "Hostfile", "~/.ssh/config"])
    with yaml_tab:
        upload = st.file_uploader("Cluster YAML", type=["yaml", "yml"], key="yaml_upload")
        if upload is not None and st.button("Load this YAML", key="yaml_load"):
            _import(lambda: cluster_actions.import_yaml(upload.getvalue(), upload.name))
    with hostfile_tab:
        text = st.text_area("Hostfile (host slots=N per line)", key="hostfile_text",
                            placeholder="node1 slots=2\nnode2 slots=2")
        port = st.number_input("First tf_port", 1024, 65535, 12345, key="hostfile_port")
        if st.button("Import hostfile", key="hostfile_import"):
            _import(lambda: cluster_actions.import_hosts(text, port))
    with ssh_tab:
        path = st.text_input("ssh_config file", "~/.ssh/config", key="ssh_config_path")
        if st.button("Read aliases", key="ssh_config_read"):
            try:
                ss.ssh_aliases = cluster_actions.ssh_aliases(path)
                if not ss.ssh_aliases:
                    st.warning("No concrete Host alias found in that file.")
            except ConsoleError as err:
                st.error(str(err))
        if ss.ssh_aliases:
            picked = st.multiselect("Aliases (the first becomes the chief)", ss.ssh_aliases,
                                    key="ssh_aliases_pick")
            alias_port = st.number_input("tf_port", 1024, 65535, 12345, key="ssh_aliases_port")
            if st.button("Use these hosts", key="ssh_aliases_add", disabled=not picked):
                _import(lambda: cluster_actions.import_hosts("\n".join(picked), alias_port))

st.caption("One row per task. Leave a cell empty for its default; worker 0 acts as chief when no "
           "task is the chief. Local tasks run on this machine. The problem column says what is "
           "wrong with a row.")
shown, _ = forms.editor_rows(ss.cluster_rows)
edited = st.data_editor(
    pd.DataFrame(shown, columns=[forms.PROBLEM, *forms.COLUMNS]), key=editor_key,
    num_rows="dynamic", width="stretch", hide_index=False,
    column_config={
        forms.PROBLEM: st.column_config.TextColumn(
            # Wide only when some row has a problem, so a clean table shows its own columns.
            forms.PROBLEM, disabled=True, width="large" if any(r[forms.PROBLEM] for r in shown) else "small",
            help="What is wrong with this row (read only; empty when the row is fine)"),
        "role": st.column_config.SelectboxColumn("role", options=["chief", "worker", "evaluator"], required=True),
        "transport": st.column_config.SelectboxColumn("transport", options=["local", "ssh"]),
        "tf_port": st.column_config.NumberColumn("tf_port", step=1, format="%d"),
        "ssh_port": st.column_config.NumberColumn("ssh_port", step=1, format="%d"),
        "gpus": st.column_config.TextColumn("gpus", help="GPU indices like 0,1; empty = CPU"),
    })
rows = forms.table_rows(edited.to_dict("records"))      # the problem column never reaches the spec
ss.cluster_current = rows
cluster, problems = forms.check_rows(rows)
if forms.stale_problems(ss.get(editor_key), edited[forms.PROBLEM], problems, len(rows)):
    # The edit changed what is wrong: draw the table again from the edited rows, with their problems.
    state.redraw_cluster_rows(rows)
    st.rerun()

for p in problems:
    {"error": st.error, "warning": st.warning}.get(p.level, st.info)(p.text())
if cluster is None:
    st.stop()
if not forms.blocking(problems):
    st.success(f"{len(cluster.tasks)} task(s): " + ", ".join(
        f"{n} on {t.endpoint}" for n, t in zip(cluster.task_names(), cluster.tasks)))

text = cluster_actions.cluster_yaml(cluster)
c1, c2 = st.columns(2)
c1.download_button("Download cluster YAML", text, "cluster.yaml", "application/x-yaml", key="download_yaml")
with c2:
    save_path = st.text_input("Save YAML to", "cluster.yaml", key="save_path")
    if st.button("Save", key="save_yaml"):
        try:
            cluster_actions.save_yaml(cluster, save_path)
            st.success(f"Saved {save_path}.")
        except ConsoleError as err:
            st.error(str(err))

if forms.blocking(problems):
    st.info("Fix the errors above to see TF_CONFIG and run the preflight.")
    st.stop()

st.subheader("TF_CONFIG")
options = state.registry().options
try:
    configs = cluster_actions.tf_configs(cluster, options)
except ConsoleError as err:   # an ssh_config that cannot be read
    st.error(str(err))
    st.stop()
st.caption("Each task's host as written, and the address every worker dials for it (an "
           "~/.ssh/config alias becomes its HostName; set a task's address column to override).")
st.dataframe(pd.DataFrame(cluster_actions.address_table(cluster, options)), hide_index=True,
             key="tf_addresses")
for tab, (name, cfg) in zip(st.tabs(list(configs)), configs.items()):
    with tab:
        st.json(cfg)
d1, d2 = st.columns(2)
d1.download_button("Download TF_CONFIG (JSON)", json.dumps(configs, indent=2), "tf_config.json",
                   "application/json", key="download_tfconfig")
d2.download_button("Download shell exports", cluster_actions.export_script(cluster, options), "tf_config.sh",
                   "text/x-shellscript", key="download_exports")

st.subheader("Preflight")
if st.button("Run preflight", key="preflight_button"):
    with st.spinner("Checking every host (SSH, Python, TensorFlow, GPUs, port, workdir)..."):
        ss.preflight = cluster_actions.preflight(cluster, state.registry().options)
if ss.preflight is not None:
    host_checks.show_preflight(ss.preflight)

ssh_targets = cluster_actions.ssh_targets(cluster)
if ssh_targets:
    st.subheader("Trust a host key")
    target = st.selectbox("Host", ssh_targets, key="hostkey_target")
    if st.button("Fetch host key", key="hostkey_fetch"):
        ss.host_key = cluster_actions.fetch_key(target, state.registry().options)
    host_checks.show_host_key(ss.host_key, state.registry().options)
