"""A run's whole life: its record, handle, attempts, outcome, launch and keeper."""
