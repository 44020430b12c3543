"""Host transports: one protocol (``base.Transport``), a local adapter and an SSH adapter."""
