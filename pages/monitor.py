"""Monitor: live loss per worker and global, step time, throughput, progress, logs, status."""
import time

import streamlit as st

from console import access_view, actions, crowd, figures, monitor_view
from console.ui import auth, page, state, widgets
from console.ui.live_chart import live_chart
from console.markdown_safe import md_escape


def main() -> None:
    if page.open_page("Monitor") is None:   # a session without the login token: the refusal is drawn, nothing else
        return
    widgets.action_panel(state.current_action(), key="monitor")
    live = state.current_run()
    if live is None:
        st.info("No run yet: start one on the Launch page.")
        return
    live.reload()   # the saved phase: another page, the CLI or a keeper may have ended the run
    live.ensure_monitor()
    widgets.run_header(live)
    for line in monitor_view.resume_warnings(live):   # a resume that not every worker confirmed
        st.warning(md_escape(line))
    # Stop near the top, before anything that waits for the hosts (the task states in the live panel).
    if live.run.state.live:
        widgets.stop_controls(live, key="monitor")
    else:   # a Stop there could only be refused
        st.caption(f"This run is {live.run.state.phase}: there is nothing left to stop.")

    # An ended run changes no more: its charts and logs are drawn once, not redrawn every 2 s, once
    # its watch agent has brought what the hosts hold (it rests then). Until a live run's first
    # points arrive the live panel looks every 0.5 s (the first curves show sooner), from Start's
    # preflight through the first 2 minutes of an attempt (a job that writes no metrics waits forever).
    def watching() -> bool:
        """The watch agent still brings what the hosts hold (it rests once it has caught up)."""
        monitor = live.monitor
        return monitor is not None and monitor.running

    CATCHING_UP = not live.run.state.live and watching()
    EVERY = 2 if live.run.state.live or CATCHING_UP else None
    WAITING = monitor_view.waiting_for_first_points(live, now=time.time())
    s_col, h_col = st.columns([1, 2])
    smoothing = s_col.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="smoothing")
    # Hidden rather than shown: the default (nothing hidden) stays the same as new metrics appear.
    hidden = frozenset(h_col.multiselect(
        "Hide charts", [n for n in figures.chart_metrics(live.metrics) if n != "loss"]
        + (["learning_rate"] if "learning_rate" in live.metrics.metric_names() else []),
        key="hidden_metrics", placeholder="every metric the run reports is charted"))
    tasks = live.metrics.tasks()
    # Past a handful of workers the charts draw the band and the odd ones out; pick others here.
    show = tuple(st.multiselect("Show workers", tasks, key="show_workers",
                                placeholder="the odd ones out are drawn; pick others to compare")
                 if len(tasks) > crowd.MANY else ())

    @auth.fragment(run_every=0.5 if WAITING else EVERY)
    def live_panel() -> None:
        snap = monitor_view.snapshot(live, smoothing, hidden, show)
        p = snap.progress
        ended = not live.run.state.live
        if ended and p.step is None:   # no chart to draw: a command job, or it ended before step 1
            st.caption(monitor_view.watch_line(snap.monitor, now=time.time()))
            if CATCHING_UP and watching():
                st.info("Reading this run's metrics from its hosts...")
            else:
                st.info("This run reported no metrics (a command job, or it ended before its first "
                        "step): its task states and logs are below.")
            widgets.status_table(live, key="monitor_status")
            widgets.attempts_table(live)
            if CATCHING_UP and not watching():
                st.rerun(scope="app")   # caught up: draw once more, then stop looking
            return
        st.progress(p.fraction, text=p.text() if p.step is not None else (live.stage() or p.text()))
        st.caption(monitor_view.watch_line(snap.monitor, now=time.time()))
        moved, members = monitor_view.membership_notes(live.run.state)
        if moved:   # a host gone for good: its task moved to a spare, or the run shrank without it
            st.info(moved)
            st.caption(members)
        nan = monitor_view.health_error(live)
        if nan:
            st.error(md_escape(nan))       # task names come from the job's metric lines
        stall = monitor_view.stall_warning(live, snap.monitor, now=time.time())
        if stall:
            st.warning(md_escape(stall))
        waits, data_warnings = monitor_view.data_notes(live)
        for line in data_warnings:
            st.warning(md_escape(line))    # task names come from the job's metric lines
        left_out = monitor_view.left_out_warning(live.metrics)
        if left_out:
            st.warning(md_escape(left_out))   # metric and task names come from the job's lines
        if snap.outliers:   # who stands out among many workers (names from the job's lines)
            st.caption(md_escape("Stand out: " + "; ".join(snap.outliers)))
        live_chart(snap.loss, key="loss_chart")
        if waits:
            st.caption(md_escape(waits))
        charts = list(snap.metrics.items()) + ([("learning_rate", snap.learning_rate)]
                                               if snap.learning_rate is not None else [])
        for row in range(0, len(charts), 2):   # two charts a row: accuracy beside the rate ...
            for col, (name, fig) in zip(st.columns(2), charts[row:row + 2]):
                with col:
                    live_chart(fig, key=f"metric_chart:{name}", height=380)
        if len(snap.last_values) > 1 or len(live.metrics.metric_names()) > 1:
            st.dataframe(snap.last_values, hide_index=True, key="last_values")   # names: text
        a, b = st.columns(2)
        with a:
            live_chart(snap.step_time, key="step_time_chart", height=380)
        with b:
            live_chart(snap.throughput, key="throughput_chart", height=380)
        gpu = live.monitor.gpu() if live.monitor else {}
        if gpu:   # only where the run's hosts have GPUs (nvidia-smi answers): each host's, by name
            st.dataframe(monitor_view.gpu_rows(gpu), hide_index=True, key="gpu_table")
            g1, g2 = st.columns(2)
            with g1:
                live_chart(figures.gpu_figure(gpu), key="gpu_util_chart", height=380)
            with g2:
                live_chart(figures.gpu_figure(gpu, "mem_used_mib", title="GPU memory used", y_title="MiB"),
                           key="gpu_mem_chart", height=380)
        widgets.status_table(live, key="monitor_status")
        widgets.attempts_table(live)
        widgets.goodput_bar(monitor_view.goodput(live, now=time.time()))
        if EVERY and not live.run.state.live and not (CATCHING_UP and watching()):
            st.rerun(scope="app")   # the run ended while the page was open (header, Stop), or caught up
        if WAITING and snap.progress.step is not None:
            st.rerun(scope="app")   # the first points are drawn: back to the 2 s pace

    live_panel()

    def dump_stacks(live) -> None:
        """Dump stacks' action (in the click's callback, ``widgets.action_button``)."""
        found, folder = actions.dump_stacks(live)
        st.session_state.stacks_dump = (monitor_view.stacks_text(found), str(folder or ""))

    refused = access_view.refusal(live.run.store.root, "dump_stacks", live.run.state.owner)
    if refused:   # no button its user may not use; the backend refuses it too
        st.caption(md_escape(f"No Dump stacks for you here: {refused}"))
    else:
        widgets.action_button("Dump stacks", "dump_stacks", dump_stacks, live,
                              spinner="asking every worker for its stacks...", disabled=not live.run.state.live,
                              help="Every worker's Python stack, now: where a hung run is stuck")
    def profile(live) -> str:
        """Profile's action: every worker's profiler for a few steps (in the click's callback)."""
        found = actions.profile(live)
        return f"Profiled steps {found.step + 1}-{found.step + found.steps}; traces in {found.folder}"

    refused = access_view.refusal(live.run.store.root, "profile", live.run.state.owner)
    if refused:
        st.caption(md_escape(f"No Profile for you here: {refused}"))
    else:
        widgets.action_button(f"Profile {actions.PROFILE_STEPS} steps", "profile", profile, live,
                              spinner="every worker runs TensorFlow's profiler from its next sync point...",
                              disabled=live.run.state.phase != "running",
                              help="Where a step's time goes on each worker: compute, collective "
                                   "communication, input; the traces open in TensorBoard")
    shown = actions.latest_profile(live)
    if shown:
        st.caption(md_escape(f"Latest profile ({shown[0]}): op time on each worker"))
        st.dataframe(monitor_view.profile_rows(shown[1]), hide_index=True, key="profile_table")
    if st.session_state.get("stacks_dump"):
        shown, folder = st.session_state.stacks_dump
        st.caption(f"Stacks saved in {folder}" if folder else "Stacks could not be saved")
        for label, text in shown.items():
            with st.expander(label, expanded=True):
                st.code(text, language="text")

    st.subheader("Logs")
    c1, c2, c3, c4 = st.columns([2, 3, 1, 1])
    task = c1.selectbox("Task", [t.name for t in live.run.state.tasks], key="log_task")
    query = c2.text_input("Search", key="log_query", placeholder="text to find")
    errors_only = c3.checkbox("Errors only", key="log_errors")
    hide_noise = c4.checkbox("Hide TF noise", value=True, key="log_noise")

    @auth.fragment(run_every=EVERY)
    def log_panel() -> None:
        lines = live.log_lines(task)
        shown = monitor_view.filter_log(lines, query, hide_noise=hide_noise, errors_only=errors_only)
        st.html(monitor_view.log_html(shown))

    log_panel()


main()
