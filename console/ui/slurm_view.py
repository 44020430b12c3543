"""The Cluster page's "Slurm" choice: the form, its problems and the batch-script preview."""
from __future__ import annotations

import streamlit as st

from backend.config.spec import default_job
from console import slurm_form
from console.ui import state

_HELP = {
    "host": "The login host where sbatch runs: a name, an IP or an ~/.ssh/config alias",
    "transport": "local when the console runs on the login host",
    "partition": "Empty: the cluster's default partition",
    "time_limit": "Minutes, or H:M:S / D-H:M:S",
    "extra": "Allowed sbatch options, comma separated: mem=16G, constraint=a100, exclusive",
    "workdir": "Relative to home, on a filesystem the nodes share",
    "tf_port": "Slot k on a node listens on tf_port + k",
}


def _keep(name: str) -> None:
    st.session_state.slurm_values[name] = st.session_state[f"slurm_{name}"]


def _field(col, name: str, values: dict) -> None:
    kw = {"key": f"slurm_{name}", "on_change": _keep, "args": (name,), "help": _HELP.get(name)}
    if name == "transport":
        col.selectbox(name, ["local", "ssh"], index=["local", "ssh"].index(values[name]), **kw)
    elif name in slurm_form.NUMBER_FIELDS:
        col.number_input(name, min_value=slurm_form.NUMBER_FIELDS[name], value=int(values[name]), step=1, **kw)
    elif name == "tf_port":
        col.number_input(name, min_value=1024, max_value=65535, value=int(values[name]), step=1, **kw)
    else:
        col.text_input(name, str(values.get(name) or ""), **kw)


def show_form():
    """Draw the form; the spec it describes, or None after showing each problem."""
    values = st.session_state.slurm_values
    layout = [("host", "transport", "user"), ("partition", "nodes", "tasks_per_node"),
              ("gpus_per_task", "cpus_per_task", "time_limit"), ("account", "qos", "extra"),
              ("python", "workdir", "tf_port"), ("identity_file", "jump_host")]
    for names in layout:
        for col, name in zip(st.columns(3), names):
            _field(col, name, values)
    spec, problems = slurm_form.build(values)
    for message in problems:
        st.error(message)
    if spec is None:
        return None
    st.success(f"{spec.num_tasks} task(s) on {spec.nodes} node(s), submitted on {spec.host}; "
               "rank 0 is the chief.")
    st.subheader("Batch script")
    st.caption("What sbatch runs, shown with the synthetic example job and RUN_ID for the run id; "
               "each task builds its TF_CONFIG from Slurm's variables.")
    st.code(slurm_form.script_preview(spec, default_job(state.EXAMPLES)), language="bash")
    return spec
