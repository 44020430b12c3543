"""Reaching hosts: transports (local, SSH), names, known hosts and trust, preflight, the host command client."""
