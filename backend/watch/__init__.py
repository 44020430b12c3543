"""Live view of a run: the watch agent (on the chief), the run monitor, the metrics store, log copies.

``agent.py`` is a standalone script copied to the chief's host; ``RunMonitor`` starts it through a
transport and feeds a ``backend.watch.metrics.MetricsStore``.
"""
from backend.watch.monitor import AGENT_PATH, RunMonitor

__all__ = ["AGENT_PATH", "RunMonitor"]
