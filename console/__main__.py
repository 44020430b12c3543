"""``python -m console``: what ``make run`` runs. A fresh login token, the console on 127.0.0.1,
and, once the console answers, the URL to open with the token in it (like Jupyter's)."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from console import signin, tokens
from console.errors import ConsoleError

APP = Path(__file__).resolve().parent / "app.py"
START_S = 60   # how long to wait for the console to answer before printing the URL anyway
MAX_UPLOAD_MB = 1   # as .streamlit/config.toml: cluster and job files are a few KiB
WILDCARDS = {"0.0.0.0", "::", "[::]", ""}


def _warn_if_public(address: str, token_on: bool) -> None:
    """Listening beyond this machine is allowed, never silent: say who can reach what."""
    if address in WILDCARDS or not tokens.is_loopback(address):
        who = ("anyone who can reach this machine" if address in WILDCARDS
               else f"anyone who can reach {address}")
        guard = ("the login token is all that stands between them and starting training on your "
                 "hosts with your SSH keys" if token_on else
                 f"and the login token is OFF ({tokens.ENV}=none): they can start training on your "
                 "hosts with your SSH keys")
        print(f"tfconsole: warning: listening on {address}: {who} reaches the console, "
              f"{guard}. The token does not cover TensorFlow's own ports (tf_port): they are open "
              "to anyone who can reach the workers. Prefer --address 127.0.0.1 and an SSH tunnel "
              "(docs/team.md, \"Security\").", file=sys.stderr, flush=True)


def _wait_healthy(proc: subprocess.Popen, health: str) -> None:
    deadline = time.monotonic() + START_S
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(health, timeout=2).read().strip() == b"ok":
                return
        except OSError:
            pass
        time.sleep(0.3)


def _sign_in(auth_file: str | None) -> tuple[tokens.Access, list[str]]:
    """The access setting, and Streamlit's options for it: with --auth-file (or TFCONSOLE_AUTH=oidc
    and ./.streamlit/secrets.toml) the sign-in settings are checked before the console starts."""
    setting = tokens.Access.OIDC if auth_file else tokens.access()
    if setting is not tokens.Access.OIDC:
        return setting, []
    signin.require_libraries()
    path = Path(auth_file or Path(".streamlit") / "secrets.toml").resolve()
    if auth_file or path.exists():
        signin.settings(signin.read_file(path), str(path))
    return setting, (["--secrets.files", str(path)] if auth_file else [])


def _announce(token: str | None, address: str, port: int, setting: tokens.Access) -> None:
    if setting is tokens.Access.OIDC:
        print(f"tfconsole: open http://{address}:{port}/ (sign-in with the team's OpenID provider)", flush=True)
        return
    if token is None:
        print(f"tfconsole: open http://{address}:{port}/ ({tokens.OFF_NOTICE})", flush=True)
        return
    print(f"tfconsole: open {tokens.url(token, address=address, port=port)}\n"
          f"tfconsole: the token is in {tokens.token_path()} (yours only); it changes at every start",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m console", description=__doc__)
    parser.add_argument("--port", type=int, default=8501, help="port to listen on (default 8501)")
    parser.add_argument("--address", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--auth-file", help="sign-in with an OpenID provider: a secrets.toml whose [auth] "
                        "table has its settings (default: the token URL, for one person)")
    args = parser.parse_args(argv)
    try:
        setting, extra = _sign_in(args.auth_file)
        token = tokens.new_token(tokens.token_path()) if setting is tokens.Access.TOKEN else None
    except ConsoleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if setting is not tokens.Access.OIDC:
        _warn_if_public(args.address, token is not None)
    env = dict(os.environ, **({tokens.PRINTED_ENV: tokens.printed_mark(token)} if token else {}))
    if setting is tokens.Access.OIDC:
        env[tokens.ENV] = tokens.Access.OIDC.value
    proc = subprocess.Popen([
        sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", args.address,
        "--server.port", str(args.port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",   # .streamlit/config.toml says why
        "--runner.postScriptGC", "false", "--server.maxUploadSize", str(MAX_UPLOAD_MB),
        "--logger.hideWelcomeMessage", "true", *extra], env=env)   # its URL has no token: we print ours instead
    # Ctrl-C reaches both processes; a TERM or HUP sent to this one alone goes on to the console.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
    try:
        _wait_healthy(proc, f"http://{args.address}:{args.port}/_stcore/health")
        if proc.poll() is None:
            _announce(token, args.address, args.port, setting)
        return proc.wait()
    except KeyboardInterrupt:
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
