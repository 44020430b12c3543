"""The command line: ``tfconsole`` and ``python -m backend``."""
