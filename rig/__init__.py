"""The real parts that tests and benchmarks stand up alike: OpenSSH servers on loopback
addresses (sshd, hosts), private network namespaces (netns), a one-node and a two-node Slurm
cluster (slurm, slurm_nodes), and a run folder fed to the watch agent (watch_run). Neither
tests/ nor bench/ owns them: both import them from here, and nothing here imports either."""
