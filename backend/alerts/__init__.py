"""Webhook alerts: where a run's alerts go (a secret kept owner-only), and the detached sender."""
