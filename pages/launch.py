"""Launch: pick a job and its parameters, then Start (preflight first) or Stop."""
import streamlit as st

from backend.errors import ConsoleError, SpecErrors
from backend.harness.jobs import DEFAULTS as HARNESS_DEFAULTS
from console import actions, cluster_actions, forms, state, widgets

state.init()
ss = st.session_state
st.title("Launch")

if ss.get("launch_flash"):
    st.success(ss.pop("launch_flash"))
live = state.current_run()
running = live is not None and live.run.state.live
rows = state.cluster_rows_now()
cluster, problems = forms.check_rows(rows)
if cluster is not None and not forms.blocking(problems):
    st.caption("Cluster: " + ", ".join(f"{n} on {t.address} ({t.transport.value})"
                                       for n, t in zip(cluster.task_names(), cluster.tasks))
               + " — change it on the Cluster page.")
else:
    st.error("The cluster has errors; fix them on the Cluster page.")

st.subheader("Job")
source = st.radio("Job", ["Example", "Module path", "Command"], horizontal=True, key="job_source")
module, command = "", ""
if source == "Example":
    names = forms.examples(state.EXAMPLES)
    default = names.index("synthetic.py") if "synthetic.py" in names else 0
    module = str(state.EXAMPLES / st.selectbox("Example job", names, index=default, key="job_example"))
elif source == "Module path":
    module = st.text_input("Job module (.py with build_model, make_dataset, ...)", key="job_module")
else:
    command = st.text_input("Command run on every host (TF_CONFIG is set)", key="job_command",
                            placeholder="examples/tf_config_script.py --steps 100")

params = {}
if source != "Command":
    job_defaults = ss.job_default.get("params", {})
    cols = st.columns(len(forms.JOB_PARAMS))
    for col, name in zip(cols, forms.JOB_PARAMS):
        low = 0 if name == "checkpoint_every" else 1
        value = int(job_defaults.get(name, HARNESS_DEFAULTS[name]))
        params[name] = col.number_input(name, min_value=low, value=value, step=1, key=f"param_{name}")

r1, r2 = st.columns(2)
mode = r1.selectbox("Restart policy", ["never", "on_failure"], key="restart_mode",
                    help="on_failure relaunches from the latest checkpoint when a task fails")
max_restarts = r2.number_input("Max restarts", 0, 100, 3, key="max_restarts", disabled=mode == "never")

start = st.button("Start", key="start_button", type="primary", disabled=running,
                  help="Disabled while the current run is live" if running else None)
if start:
    try:
        job = forms.build_job(source="command" if source == "Command" else "module", module=module,
                              command=command, params=params, restart_mode=mode,
                              max_restarts=max_restarts, base_dir=state.ROOT)
    except SpecErrors as err:
        for e in err.errors:
            st.error(str(e))
        job = None
    except ConsoleError as err:
        st.error(str(err))
        job = None
    if job is not None:
        with st.status("Preflight, then starting every task...", expanded=True) as box:
            result = actions.start(rows, job, state.registry())
            if result.live is not None:
                ss.run_id = result.live.run_id
                box.update(label=f"Started run {result.live.run_id}", state="complete", expanded=False)
            else:
                box.update(label="Not started", state="error")
        for message in result.errors:
            st.error(message)
        if result.preflight and result.preflight["rows"] and result.live is None:
            cluster_actions.show_preflight(result.preflight)
        if result.live is not None:   # rerun: Start turns disabled, the status table appears
            ss.launch_flash = f"Run {result.live.run_id} started. Open the Monitor page to watch its loss."
            st.rerun()

st.subheader("Current run")
if live is None:
    st.info("No run yet: press Start.")
    st.stop()
widgets.run_header(live)
widgets.status_table(live, key="launch_status")
widgets.attempts_table(live)
if live.run.state.live:
    widgets.stop_controls(live, key="launch")
