"""How a run's tasks are started, inspected and stopped: one ``Engine`` per kind of cluster.

``hosts.HostsEngine`` starts tasks itself over SSH or as local processes. A scheduler (Slurm)
is another engine behind the same protocol; nothing above ``Run`` knows which one it talks to.
"""
