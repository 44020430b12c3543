"""Hyperparameter sweeps: many ordinary runs from one form, searched and pruned by
Optuna. ``spec`` builds and checks a sweep (pure); ``study`` is the Optuna glue; ``keeper`` is the
detached process that asks for trials, launches them as runs and tells Optuna how they did."""
