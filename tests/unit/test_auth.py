"""The login token's file, setting and comparison (console/tokens.py), without a browser."""
from __future__ import annotations

import os
import stat

import pytest

from backend.errors import SpecError
from console import tokens
from console.ui import auth


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_token_is_readable_by_its_owner_only_even_with_an_open_umask(tmp_path):
    path = tmp_path / "runs" / tokens.FILE_NAME
    old = os.umask(0)          # the umask must not decide who can read the token
    try:
        token = tokens.new_token(path)
    finally:
        os.umask(old)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700       # the runs folder it made holds run records too
    assert path.read_text().strip() == token
    assert len(token) >= 43                  # 32 random bytes, URL-safe
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_the_token_is_kept_until_the_file_goes(tmp_path):
    path = tmp_path / tokens.FILE_NAME
    first = tokens.read_token(path)            # none yet: made now
    assert tokens.read_token(path) == first
    path.unlink()
    assert tokens.read_token(path) != first


def test_a_token_others_could_read_is_replaced(tmp_path):
    path = tmp_path / tokens.FILE_NAME
    leaked = tokens.new_token(path)
    path.chmod(0o644)
    fresh = tokens.read_token(path)
    assert fresh != leaked
    assert _mode(path) == 0o600


def test_an_empty_token_file_is_replaced(tmp_path):
    path = tmp_path / tokens.FILE_NAME
    path.write_text("\n")
    path.chmod(0o600)
    assert len(tokens.read_token(path)) >= 43


def test_a_token_file_that_cannot_be_written_is_one_of_our_errors(tmp_path):
    (tmp_path / "runs").write_text("a file where the runs folder should be")
    with pytest.raises(tokens.ConsoleError, match="Cannot write the login token file"):
        tokens.new_token(tmp_path / "runs" / tokens.FILE_NAME)


def test_the_comparison_is_constant_time(monkeypatch):
    calls = []
    real = tokens.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    assert tokens.matches("abc", "abc")
    assert not tokens.matches("abd", "abc")
    assert calls == [(b"abc", b"abc"), (b"abd", b"abc")]


@pytest.mark.parametrize("presented", [None, "", "é-not-ascii", ["abc"], "abc "])
def test_anything_but_the_token_does_not_match(presented):
    assert not tokens.matches(presented, "abc")


def test_the_setting_is_on_unless_turned_off(monkeypatch):
    monkeypatch.delenv(tokens.ENV, raising=False)
    assert tokens.access() is tokens.Access.TOKEN
    monkeypatch.setenv(tokens.ENV, "none")
    assert tokens.access() is tokens.Access.NONE
    monkeypatch.setenv(tokens.ENV, "off")
    with pytest.raises(SpecError) as err:
        tokens.access()
    assert err.value.field == tokens.ENV and "'none'" in str(err.value)


def test_the_url_carries_the_token():
    assert tokens.url("t-1_x", address="127.0.0.1", port=8501) == "http://127.0.0.1:8501/?token=t-1_x"
    assert tokens.url("t", address="h", port=1, base_path="/console/") == "http://h:1/console/?token=t"


def test_sessions_that_find_the_token_gone_at_once_make_one_new_token(tmp_path, monkeypatch, capsys):
    """Every open page's live parts check the token each second, in the server's threads: after
    the owner deletes the file, the first check makes the new token and prints its URL, once,
    and every other check reads that same token (console/ui/auth.py, _server_token's lock)."""
    import threading
    monkeypatch.setenv("TFCONSOLE_RUNS", str(tmp_path))
    old = auth._server_token()
    tokens.token_path().unlink()
    start = threading.Barrier(8)
    seen = []

    def check() -> None:
        start.wait()
        seen.append(auth._server_token())

    threads = [threading.Thread(target=check) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    new = tokens.token_path().read_text().strip()
    assert seen == [new] * 8 and new != old
    assert capsys.readouterr().out.count(f"?token={new}") == 1
