"""Launch: pick a job and its parameters, then Start (preflight first) or Stop."""
from pathlib import Path

import streamlit as st

from console import access_view, actions, forms
from console.ui import host_checks, page, state, widgets


def main() -> None:
    ss = page.open_page("Launch")
    if ss is None:   # a session without the login token: the refusal is drawn, nothing else
        return

    action = state.current_action()
    live = state.current_run()
    starting = action is not None and action.kind == "start" and not action.done
    running = starting or (live is not None and live.run.state.live)
    rows = state.cluster_choice()   # the task table's rows, or a SlurmSpec ("Slurm" on the Cluster page)
    cluster, problems = forms.check_rows(rows) if isinstance(rows, list) else (None, [])
    if ss.cluster_kind == "Slurm":
        st.caption(f"Cluster: Slurm, {rows.num_tasks} task(s) submitted on {rows.host} — change it on the "
                   "Cluster page." if rows else "The Slurm form has errors; fix them on the Cluster page.")
    elif cluster is not None and not forms.blocking(problems):
        st.caption("Cluster: " + ", ".join(f"{n} on {t.endpoint} ({t.transport.value})"
                                           for n, t in zip(cluster.task_names(), cluster.tasks))
                   + " — change it on the Cluster page.")
    else:
        st.error("The cluster has errors; fix them on the Cluster page.")

    st.subheader("Job")
    # Each widget starts from ss.launch_form and copies changes back: the values survive a page switch.
    form = ss.launch_form
    source = st.radio("Job", forms.JOB_SOURCES, index=forms.JOB_SOURCES.index(form["job_source"]),
                      horizontal=True, **state.kept("job_source"))
    if source == "Example":
        names = forms.examples(state.EXAMPLES)
        default = names.index(form["job_example"]) if form["job_example"] in names else 0
        st.selectbox("Example job", names, index=default, **state.kept("job_example"))
    elif source == "Module path":
        st.text_input("Job module (.py with build_model, make_dataset, ...)", form["job_module"],
                      **state.kept("job_module"))
    else:
        st.text_input("Command run on every host (TF_CONFIG is set)", form["job_command"],
                      placeholder="examples/keras_fit.py --epochs 3", **state.kept("job_command"))
        st.text_input("Files sent to every host (local paths, comma-separated)", form.get("job_files", ""),
                      placeholder="~/project/train.py",
                      help="Copied into the run's job/ folder on every host; the command runs there, "
                           "so name a shipped script by its file name: train.py --epochs 3",
                      **state.kept("job_files"))
        folder = st.text_input("Project folder sent to every host (optional)", form.get("job_project", ""),
                               placeholder="~/my_project",
                               help="Its tree becomes the run's job/ folder on every host, where the command "
                                    "runs; .tfconsoleignore or .gitignore say what stays here",
                               **state.kept("job_project"))
        if folder.strip():
            st.caption(actions.project_preview(folder, base_dir=Path.cwd()))
            st.checkbox("Install its requirements on every host (pip)", form.get("job_pip_install", False),
                        help="pip installs the folder's requirements.txt (or pyproject.toml dependencies) "
                             "into each host's Python before the tasks start, logged in logs/pip-install.log; "
                             "off, preflight only checks them", **state.kept("job_pip_install"))

    if source != "Command":
        cols = st.columns(len(forms.JOB_PARAMS))
        for col, name in zip(cols, forms.JOB_PARAMS):
            if name in forms.FLOAT_PARAMS:
                col.number_input(name, min_value=0.0, value=form[f"param_{name}"], step=0.01,
                                 help="seconds each worker sleeps after every step", **state.kept(f"param_{name}"))
                continue
            low = 0 if name == "checkpoint_every" else 1
            col.number_input(name, min_value=low, value=form[f"param_{name}"], step=1, **state.kept(f"param_{name}"))

    r1, r2, r3 = st.columns(3)
    mode = r1.selectbox("Restart policy", forms.RESTART_MODES,
                        index=forms.RESTART_MODES.index(form["restart_mode"]),
                        help="on_failure relaunches from the latest checkpoint when a task fails",
                        **state.kept("restart_mode"))
    r2.number_input("Max restarts", 0, 100, form["max_restarts"], disabled=mode == "never",
                    **state.kept("max_restarts"))
    r3.number_input("Stall timeout (s)", min_value=0.0, value=form["stall_timeout_s"], step=30.0,
                    disabled=mode == "never",
                    help="Restart when no task shows a sign of life (new metrics, log output or CPU "
                         "use) for this long; 0: never", **state.kept("stall_timeout_s"))

    def start() -> None:
        """Start's action (in the click's callback, ``widgets.action_button``): the job the form
        holds at the click (a widget shown now holds the newest value, the kept form the rest),
        launched in the background, so another click cannot cut it off."""
        values = {**ss.launch_form, **{k: ss[k] for k in ss.launch_form if k in ss}}
        # A relative path in the form is relative to the folder the console was started in.
        job = forms.job_from_form(values, state.EXAMPLES, base_dir=Path.cwd())
        ss.run_id = ss.action_run_id = actions.begin_start(state.cluster_choice(), job, state.registry())

    refused = access_view.refusal(state.run_store().root, "launch")
    widgets.action_button("Start", "start_button", start, type="primary", disabled=running or refused is not None,
                          help="Disabled while the current run is live" if running else refused)

    action = state.current_action()
    widgets.action_panel(action, key="launch", start_notice=True)
    if action is not None and action.done and action.kind == "start" and action.error:
        report = getattr(action.result, "preflight", None)
        if report and report["rows"]:
            host_checks.show_preflight(report)

    st.subheader("Current run")
    if live is None:
        st.info("No run yet: press Start." if not starting else "The run is starting; it shows here once its tasks run.")
        return
    live.reload()   # the saved phase: another page, the CLI or a keeper may have ended the run
    widgets.run_header(live)
    stage = live.stage()   # from the task states last read: this page's own read is below
    if stage:
        st.caption(f"Start progress: {stage}")
    # Stop before the task states: those wait for every host to answer (seconds, more when a host is
    # slow or cut off), and Stop must not wait for them.
    if live.run.state.live:
        widgets.stop_controls(live, key="launch")
    widgets.status_table(live, key="launch_status")
    widgets.attempts_table(live)


main()
