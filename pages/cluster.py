"""Cluster: the tasks that will train, their checks, TF_CONFIG, preflight and host keys."""
import json

import pandas as pd
import streamlit as st

from console import cluster_actions, forms, slurm_form
from console.errors import ConsoleError
from console.ui import host_checks, page, slurm_view, state, widgets


def main() -> None:
    ss = page.open_page("Cluster")
    if ss is None:   # a session without the login token: the refusal is drawn, nothing else
        return
    ss.cluster_kind = st.radio("Tasks run on", slurm_form.KINDS, index=slurm_form.KINDS.index(ss.cluster_kind),
                               horizontal=True, key="cluster_kind_choice")
    if ss.cluster_kind == "Slurm":   # Slurm starts the tasks: a form instead of the table (docs/slurm.md)
        slurm_view.show_form()
        return

    # The editor's widget state is dropped while another page shows: start again from the last edit
    # (its spare hosts and min_workers included: ``forms.ClusterRows``).
    editor_key = f"cluster_editor_{ss.cluster_version}"
    if ss.cluster_current is not None and editor_key not in ss and ss.cluster_current != ss.cluster_rows:
        state.set_cluster_rows(ss.cluster_current)
        editor_key = f"cluster_editor_{ss.cluster_version}"

    # Button actions (``widgets.action_button``): run in the click's callback, before the page is
    # drawn; they read the other widgets' values from the session, as they stood at the click.
    def _import(build, *args) -> str:
        """Replace the table with an import's rows (``build(*args)``: a function returning rows)."""
        state.set_cluster_rows(build(*args))
        return "Imported. Check the table below."

    def load_yaml() -> str | None:
        upload = ss.get("yaml_upload")
        return None if upload is None else _import(cluster_actions.import_yaml, upload.getvalue(), upload.name)

    def import_hostfile() -> str:
        return _import(cluster_actions.import_hosts, ss.hostfile_text, ss.hostfile_port)

    def read_aliases() -> tuple[str, str] | None:
        ss.ssh_aliases = cluster_actions.ssh_aliases(ss.ssh_config_path)
        return None if ss.ssh_aliases else ("warning", "No concrete Host alias found in that file.")

    def use_aliases() -> str:
        return _import(cluster_actions.import_hosts, "\n".join(ss.ssh_aliases_pick), ss.ssh_aliases_port)

    def save_yaml(cluster) -> str:
        cluster_actions.save_yaml(cluster, ss.save_path)
        return f"Saved {ss.save_path}."

    def run_preflight(cluster) -> None:
        ss.preflight = cluster_actions.preflight(cluster, state.registry().options, spares=True)

    def fetch_host_key() -> None:
        ss.host_key = cluster_actions.fetch_key(ss.hostkey_target, state.registry().options)

    with st.expander("Import tasks", expanded=False):
        yaml_tab, hostfile_tab, ssh_tab = st.tabs(["YAML file", "Hostfile", "~/.ssh/config"])
        with yaml_tab:
            upload = st.file_uploader("Cluster YAML", type=["yaml", "yml"], key="yaml_upload")
            if upload is not None:
                widgets.action_button("Load this YAML", "yaml_load", load_yaml)
        with hostfile_tab:
            st.text_area("Hostfile (host slots=N per line)", key="hostfile_text",
                         placeholder="node1 slots=2\nnode2 slots=2")
            st.number_input("First tf_port", 1024, 65535, 12345, key="hostfile_port")
            widgets.action_button("Import hostfile", "hostfile_import", import_hostfile)
        with ssh_tab:
            st.text_input("ssh_config file", "~/.ssh/config", key="ssh_config_path")
            widgets.action_button("Read aliases", "ssh_config_read", read_aliases)
            if ss.ssh_aliases:
                picked = st.multiselect("Aliases (the first becomes the chief)", ss.ssh_aliases,
                                        key="ssh_aliases_pick")
                st.number_input("tf_port", 1024, 65535, 12345, key="ssh_aliases_port")
                widgets.action_button("Use these hosts", "ssh_aliases_add", use_aliases, disabled=not picked)

    st.caption("One row per task. Leave a cell empty for its default; worker 0 acts as chief when no "
               "task is the chief. Local tasks run on this machine. The problem column says what is "
               "wrong with a row.")
    shown, _ = forms.editor_rows(ss.cluster_rows)
    edited = _editor(shown, forms.COLUMNS, editor_key)

    st.markdown("**Spare hosts** (`spares:`)")
    st.caption("Idle hosts, with a task's columns but no role: when a task's host is gone for good, "
               "the next attempt moves that task (chief included) to the first spare that passes "
               "preflight, resumed from the newest checkpoint. Leave empty for none.")
    spare_key = f"spares_editor_{ss.cluster_version}"
    spares = _editor(forms.spare_editor_rows(ss.cluster_rows), forms.SPARE_COLUMNS, spare_key)
    least = st.number_input(
        "min_workers", min_value=0, value=forms.min_workers(ss.cluster_rows), step=1,
        key=f"min_workers_{ss.cluster_version}", placeholder="never run on fewer tasks",
        help="With no spare left for a lost host's task, the next attempt runs without it if at "
             "least this many chief/worker tasks remain (the global batch stays the same). Empty: "
             "the run fails instead.")
    # The problem columns never reach the spec.
    rows = forms.ClusterRows(forms.table_rows(edited.to_dict("records")),
                             forms.table_rows(spares.to_dict("records"), forms.SPARE_COLUMNS), least)
    ss.cluster_current = rows
    cluster, problems = forms.check_rows(rows)
    if (forms.stale_problems(ss.get(editor_key), edited[forms.PROBLEM], problems, len(rows))
            or forms.stale_problems(ss.get(spare_key), spares[forms.PROBLEM], problems, len(rows.spares),
                                    "spares")):
        # The edit changed what is wrong: draw the tables again from the edited rows, with their problems.
        state.redraw_cluster_rows(rows)
        st.rerun()

    for p in problems:
        {"error": st.error, "warning": st.warning}.get(p.level, st.info)(p.text())
    if cluster is None:
        return
    if not forms.blocking(problems):
        st.success(f"{len(cluster.tasks)} task(s): " + ", ".join(
            f"{n} on {t.endpoint}" for n, t in zip(cluster.task_names(), cluster.tasks))
            + (f"; {len(cluster.spares)} spare(s): " + ", ".join(t.endpoint for t in cluster.spares)
               if cluster.spares else "")
            + (f"; min_workers {cluster.min_workers}" if cluster.min_workers is not None else ""))

    text = cluster_actions.cluster_yaml(cluster)
    c1, c2 = st.columns(2)
    c1.download_button("Download cluster YAML", text, "cluster.yaml", "application/x-yaml", key="download_yaml")
    with c2:
        st.text_input("Save YAML to", "cluster.yaml", key="save_path")
        widgets.action_button("Save", "save_yaml", save_yaml, cluster)

    if forms.blocking(problems):
        st.info("Fix the errors above to see TF_CONFIG and run the preflight.")
        return

    st.subheader("TF_CONFIG")
    options = state.registry().options
    try:
        configs = cluster_actions.tf_configs(cluster, options)
    except ConsoleError as err:   # an ssh_config that cannot be read
        st.error(str(err))
        return
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
    widgets.action_button("Run preflight", "preflight_button", run_preflight, cluster,
                          spinner="Checking every host (SSH, Python, TensorFlow, GPUs, port, workdir)...")
    if ss.preflight is not None:
        host_checks.show_preflight(ss.preflight)

    ssh_targets = cluster_actions.ssh_targets(cluster)
    if ssh_targets:
        st.subheader("Trust a host key")
        st.selectbox("Host", ssh_targets, key="hostkey_target")
        widgets.action_button("Fetch host key", "hostkey_fetch", fetch_host_key)
        host_checks.show_host_key(ss.host_key, state.registry().options)


def _editor(shown: list[dict], columns: tuple[str, ...], key: str) -> pd.DataFrame:
    """A table editor of ``shown`` rows (the problem column first, read only), as edited."""
    config = {
        forms.PROBLEM: st.column_config.TextColumn(
            # Wide only when some row has a problem, so a clean table shows its own columns.
            forms.PROBLEM, disabled=True, width="large" if any(r[forms.PROBLEM] for r in shown) else "small",
            help="What is wrong with this row (read only; empty when the row is fine)"),
        "role": st.column_config.SelectboxColumn("role", options=["chief", "worker", "evaluator"], required=True),
        "transport": st.column_config.SelectboxColumn("transport", options=["local", "ssh"]),
        "tf_port": st.column_config.NumberColumn("tf_port", step=1, format="%d"),
        "ssh_port": st.column_config.NumberColumn("ssh_port", step=1, format="%d"),
        "gpus": st.column_config.TextColumn("gpus", help="GPU indices like 0,1; empty = CPU"),
    }
    return st.data_editor(pd.DataFrame(shown, columns=[forms.PROBLEM, *columns]), key=key, num_rows="dynamic",
                          width="stretch", hide_index=False,
                          column_config={k: v for k, v in config.items() if k in (forms.PROBLEM, *columns)})


main()
