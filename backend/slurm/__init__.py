"""Slurm as a second way to run a job: the cluster kind (spec), the batch script (script) and
Slurm's job states read back (states). Pure; the engine that drives Slurm's command-line tools
is ``backend.engines.slurm``. Facts and limits: docs/slurm.md.
"""
