"""Cluster: the tasks that will train, their checks, TF_CONFIG, preflight and host keys."""
import json

import pandas as pd
import streamlit as st
import yaml

from backend import tfconfig
from backend.errors import ConsoleError, SpecError, SpecErrors
from backend.spec import cluster_from_dict, cluster_to_dict, import_hostfile, import_ssh_config, save_cluster
from console import cluster_actions, forms, state

state.init()
ss = st.session_state
st.title("Cluster")

# The editor's widget state is dropped while another page shows: start again from the last edit.
editor_key = f"cluster_editor_{ss.cluster_version}"
if ss.cluster_current is not None and editor_key not in ss and ss.cluster_current != ss.cluster_rows:
    state.set_cluster_rows(ss.cluster_current)
    editor_key = f"cluster_editor_{ss.cluster_version}"


def _import(build) -> None:
    """Run an import; on success replace the table, else show each problem."""
    try:
        state.set_cluster_rows(forms.cluster_rows(cluster_to_dict(build())))
        st.success("Imported. Check the table below.")
    except (SpecErrors, SpecError) as err:
        for e in getattr(err, "errors", [err]):
            st.error(str(e))
    except ConsoleError as err:
        st.error(str(err))


with st.expander("Import tasks", expanded=False):
    yaml_tab, hostfile_tab, ssh_tab = st.tabs(["YAML file", "Hostfile", "~/.ssh/config"])
    with yaml_tab:
        upload = st.file_uploader("Cluster YAML", type=["yaml", "yml"], key="yaml_upload")
        if upload is not None and st.button("Load this YAML", key="yaml_load"):
            def _from_yaml():
                try:
                    return cluster_from_dict(yaml.safe_load(upload.getvalue().decode("utf-8", "replace")))
                except yaml.YAMLError as err:
                    raise SpecError("file", f"not valid YAML: {str(err).splitlines()[0]}",
                                    "Fix the YAML at the line shown.") from None
            _import(_from_yaml)
    with hostfile_tab:
        text = st.text_area("Hostfile (host slots=N per line)", key="hostfile_text",
                            placeholder="node1 slots=2\nnode2 slots=2")
        port = st.number_input("First tf_port", 1024, 65535, 12345, key="hostfile_port")
        if st.button("Import hostfile", key="hostfile_import"):
            _import(lambda: import_hostfile(text, tf_port=int(port)))
    with ssh_tab:
        path = st.text_input("ssh_config file", "~/.ssh/config", key="ssh_config_path")
        if st.button("Read aliases", key="ssh_config_read"):
            try:
                import os
                ss.ssh_aliases = import_ssh_config(os.path.expanduser(path))
                if not ss.ssh_aliases:
                    st.warning("No concrete Host alias found in that file.")
            except ConsoleError as err:
                st.error(str(err))
        if ss.ssh_aliases:
            picked = st.multiselect("Aliases (the first becomes the chief)", ss.ssh_aliases,
                                    key="ssh_aliases_pick")
            alias_port = st.number_input("tf_port", 1024, 65535, 12345, key="ssh_aliases_port")
            if st.button("Use these hosts", key="ssh_aliases_add", disabled=not picked):
                _import(lambda: import_hostfile("\n".join(picked), tf_port=int(alias_port)))

st.caption("One row per task. Leave a cell empty for its default; worker 0 acts as chief when no "
           "task is the chief. Local tasks run on this machine.")
edited = st.data_editor(
    pd.DataFrame(ss.cluster_rows, columns=list(forms.COLUMNS)), key=editor_key,
    num_rows="dynamic", width="stretch", hide_index=False,
    column_config={
        "role": st.column_config.SelectboxColumn("role", options=["chief", "worker", "evaluator"], required=True),
        "transport": st.column_config.SelectboxColumn("transport", options=["local", "ssh"]),
        "tf_port": st.column_config.NumberColumn("tf_port", step=1, format="%d"),
        "ssh_port": st.column_config.NumberColumn("ssh_port", step=1, format="%d"),
        "gpus": st.column_config.TextColumn("gpus", help="GPU indices like 0,1; empty = CPU"),
    })
rows = edited.to_dict("records")
ss.cluster_current = rows
cluster, problems = forms.check_rows(rows)

for p in problems:
    {"error": st.error, "warning": st.warning}.get(p.level, st.info)(p.text())
if cluster is None:
    st.stop()
if not forms.blocking(problems):
    st.success(f"{len(cluster.tasks)} task(s): " + ", ".join(
        f"{n} on {t.address}" for n, t in zip(cluster.task_names(), cluster.tasks)))

text = yaml.safe_dump(cluster_to_dict(cluster), sort_keys=False)
c1, c2 = st.columns(2)
c1.download_button("Download cluster YAML", text, "cluster.yaml", "application/x-yaml", key="download_yaml")
with c2:
    save_path = st.text_input("Save YAML to", "cluster.yaml", key="save_path")
    if st.button("Save", key="save_yaml"):
        try:
            save_cluster(cluster, save_path)
            st.success(f"Saved {save_path}.")
        except OSError as err:
            st.error(f"could not write {save_path}: {err.strerror or err}. Choose a writable path.")

if forms.blocking(problems):
    st.info("Fix the errors above to see TF_CONFIG and run the preflight.")
    st.stop()

st.subheader("TF_CONFIG")
configs = tfconfig.all_tf_configs(cluster)
for tab, (name, cfg) in zip(st.tabs(list(configs)), configs.items()):
    with tab:
        st.json(cfg)
lines = "\n".join(f"# {n}\n{line}" for n, line in tfconfig.export_lines(cluster).items())
d1, d2 = st.columns(2)
d1.download_button("Download TF_CONFIG (JSON)", json.dumps(configs, indent=2), "tf_config.json",
                   "application/json", key="download_tfconfig")
d2.download_button("Download shell exports", lines + "\n", "tf_config.sh", "text/x-shellscript",
                   key="download_exports")

st.subheader("Preflight")
if st.button("Run preflight", key="preflight_button"):
    with st.spinner("Checking every host (SSH, Python, TensorFlow, GPUs, port, workdir)..."):
        ss.preflight = cluster_actions.preflight(cluster, state.registry().options)
if ss.preflight is not None:
    cluster_actions.show_preflight(ss.preflight)

ssh_targets = cluster_actions.ssh_targets(cluster)
if ssh_targets:
    st.subheader("Trust a host key")
    target = st.selectbox("Host", ssh_targets, key="hostkey_target")
    if st.button("Fetch host key", key="hostkey_fetch"):
        ss.host_key = cluster_actions.fetch_key(target)
    cluster_actions.show_host_key(ss.host_key, state.registry().options)
