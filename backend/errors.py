"""One typed error family. Every message ends with what the user can do next.

Callers catch ``ConsoleError`` and show ``str(err)``; nothing below needs a traceback to be
understood.
"""
from __future__ import annotations


class ConsoleError(Exception):
    """Base of every error the console raises on purpose.

    ``problem`` says what went wrong, ``fix`` what to do about it; ``str()`` joins them.
    """

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} {fix}".strip() if fix else problem)


class SpecError(ConsoleError):
    """A cluster or job field holds a value we cannot use. ``field`` names it (``tasks[1].port``)."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}.", fix)


class SpecErrors(ConsoleError):
    """Several ``SpecError`` at once, so a form can show each next to its row."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


class HostError(ConsoleError):
    """A command or connection on one host failed."""

    def __init__(self, host: str, problem: str, fix: str = "", *, command: str = "",
                 exit_code: int | None = None, stderr_tail: str = "") -> None:
        self.host = host
        self.command = command
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        detail = f" (exit {exit_code})" if exit_code is not None else ""
        tail = f" stderr: {stderr_tail.strip()[-400:]}" if stderr_tail.strip() else ""
        super().__init__(f"{host}: {problem}{detail}.{tail}", fix)


class HostKeyError(HostError):
    """The host's SSH key is unknown or changed. ``fingerprint`` is what the server offered."""

    def __init__(self, host: str, problem: str, fix: str, *, fingerprint: str, key_type: str) -> None:
        self.fingerprint = fingerprint
        self.key_type = key_type
        super().__init__(host, problem, fix)


class HostKeyChanged(HostKeyError):
    """The host offers another key than the one known_hosts trusts for it: a reinstalled host,
    or an attack. It answered, so it is no silence: the keeper holds the run for an operator's
    check instead of counting the host gone. ``known``: the trusted fingerprints; ``trust``: the
    command that replaces the old key once the new one is checked."""

    def __init__(self, host: str, problem: str, fix: str, *, fingerprint: str, key_type: str,
                 known: tuple[str, ...], trust: str) -> None:
        self.known, self.trust = tuple(known), trust
        super().__init__(host, problem, fix, fingerprint=fingerprint, key_type=key_type)


class MultiHostError(ConsoleError):
    """An action on many hosts failed on some of them; ``errors`` maps host -> error."""

    def __init__(self, action: str, errors: dict[str, Exception], fix: str) -> None:
        self.errors = dict(errors)
        lines = "; ".join(f"{e}" for e in self.errors.values())
        super().__init__(f"{action} failed on {len(self.errors)} host(s): {lines}", fix)


class RunError(ConsoleError):
    """A run cannot do what was asked (not found, not live, already live)."""


class ArtifactError(ConsoleError):
    """A checkpoint or export is missing, partial or corrupt."""


class DiskFullError(ConsoleError, OSError):
    """The console machine's disk under the runs folder is full (ENOSPC, or the user's quota):
    nothing of the run could be recorded. Still an OSError, so a best-effort write that shrugged
    off a full disk before shrugs this off too; ``folder`` is where it failed."""

    def __init__(self, folder: str, *, to: str = "") -> None:
        self.folder = str(folder)
        super().__init__(f"disk full on the console machine: free space in {folder}"
                         + (f" (could not {to})" if to else "") + ".",
                         "Free space on that disk; the run's keeper holds its run meanwhile and "
                         "goes on by itself once there is room.")


class SweepError(ConsoleError):
    """A sweep cannot go on or cannot be read (its storage, its objective, its trials)."""
