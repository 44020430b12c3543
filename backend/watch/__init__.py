"""Live view of a run: the watch agent (on the chief), the run monitor, the metrics store, log copies.

The agent is a host command (``python RUN/lib watch``, backend/client/harness/watch.py);
``RunMonitor`` starts it through a transport and feeds a ``backend.watch.metrics.MetricsStore``.
"""
from backend.watch.monitor import RunMonitor, local_agent

__all__ = ["RunMonitor", "local_agent"]
