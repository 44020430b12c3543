"""Cluster and job specs: fields, cluster and job files, the Slurm spec, TF_CONFIG, job x cluster fit."""
