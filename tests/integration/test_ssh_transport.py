"""The SSH adapter against real sshd servers: commands, files, host keys, auth, quoting."""
from __future__ import annotations

import pytest

from backend.errors import HostError, HostKeyError
from backend.hosts.ssh import SSHOptions, SSHTransport
from backend.hosts.trust import fetch_host_key, trust_host_key
from rig import sshd


def transport(host, client_key, options, **kw) -> SSHTransport:
    return SSHTransport(host.address, port=host.port, identity_file=str(client_key), options=options, **kw)


def test_run_output_exit_code_and_stdin(ssh_hosts, client_key, ssh_options):
    # Files travel as commands with stdin (backend.hosts.remote; tested in test_hostctl.py).
    t = transport(ssh_hosts[0], client_key, ssh_options)
    result = t.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.host == ssh_hosts[0].address and result.command.startswith("sh -c")
    big = bytes(range(256)) * 20000   # larger than one SSH window
    assert t.run(["wc", "-c"], stdin=big).stdout.strip() == str(len(big))
    t.close()


def test_arguments_are_never_shell(ssh_hosts, client_key, ssh_options, tmp_path):
    canary = tmp_path / "pwned"
    t = transport(ssh_hosts[0], client_key, ssh_options)
    for hostile in [f"$(touch {canary})", f"; touch {canary}", f"`touch {canary}`", f"a' ; touch {canary}; '"]:
        assert t.run(["echo", hostile]).stdout == hostile + "\n"
    assert not canary.exists()


def test_unknown_host_key_refused_with_fingerprint(ssh_hosts, client_key, tmp_path):
    options = SSHOptions(known_hosts=str(tmp_path / "empty_known_hosts"),
                         ssh_config=str(tmp_path / "none"), allow_agent=False, look_for_keys=False)
    host = ssh_hosts[0]
    with pytest.raises(HostKeyError) as err:
        transport(host, client_key, options).run(["true"])
    expected = fetch_host_key(host.address, port=host.port, options=options).fingerprint
    assert err.value.fingerprint == expected
    assert expected in str(err.value) and "trust" in str(err.value)
    # The explicit action records the key; then the connection works.
    trust_host_key(host.address, expected, port=host.port, options=options)
    assert transport(host, client_key, options).run(["true"]).ok


def test_trust_refuses_a_fingerprint_that_does_not_match(ssh_hosts, tmp_path):
    with pytest.raises(HostKeyError):
        trust_host_key(ssh_hosts[0].address, "SHA256:not-this-one", port=ssh_hosts[0].port,
                       options=SSHOptions(known_hosts=str(tmp_path / "kh"), ssh_config=str(tmp_path / "none")))
    assert not (tmp_path / "kh").exists()


def test_changed_host_key_refused(ssh_hosts, client_key, tmp_path):
    # Record host 1's key under host 0's name: to the client, host 0's key "changed".
    known = tmp_path / "known_hosts"
    key_type, key = ssh_hosts[1].host_key_pub.split()[:2]
    known.write_text(f"[{ssh_hosts[0].address}]:{ssh_hosts[0].port} {key_type} {key}\n")
    options = SSHOptions(known_hosts=str(known), ssh_config=str(tmp_path / "none"),
                         allow_agent=False, look_for_keys=False)
    with pytest.raises(HostKeyError, match="CHANGED"):
        transport(ssh_hosts[0], client_key, options).run(["true"])


def test_wrong_key_refused(ssh_hosts, ssh_options, tmp_path):
    sshd.keygen(tmp_path / "other_key")
    with pytest.raises(HostError, match="authentication failed"):
        transport(ssh_hosts[0], tmp_path / "other_key", ssh_options).run(["true"])


def test_unreachable_host(client_key, ssh_options, ssh_hosts):
    with pytest.raises(HostError, match="cannot connect"):
        SSHTransport("127.0.0.9", port=sshd.free_port(), identity_file=str(client_key),
                     options=ssh_options).run(["true"])


def test_ssh_config_alias(ssh_hosts, client_key, ssh_options, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(f"Host trainer\n  HostName {ssh_hosts[1].address}\n  Port {ssh_hosts[1].port}\n"
                      f"  IdentityFile {client_key}\n")
    options = SSHOptions(known_hosts=ssh_options.known_hosts, ssh_config=str(config),
                         allow_agent=False, look_for_keys=False)
    assert SSHTransport("trainer", options=options).run(["echo", "hi"]).stdout == "hi\n"


def test_a_missing_identity_file_is_skipped_and_named_when_no_key_is_left(ssh_hosts, client_key, ssh_options, tmp_path):
    """As OpenSSH does: an IdentityFile that is not there is passed over (the next one logs in);
    when it was the only way in, the error names it instead of "No such file or directory"."""
    config = tmp_path / "ssh_config"
    config.write_text(f"Host trainer\n  HostName {ssh_hosts[1].address}\n  Port {ssh_hosts[1].port}\n"
                      f"  IdentityFile {tmp_path}/id_gone\n  IdentityFile {client_key}\n"
                      f"Host lost\n  HostName {ssh_hosts[1].address}\n  Port {ssh_hosts[1].port}\n"
                      f"  IdentityFile {tmp_path}/id_gone\n")
    options = SSHOptions(known_hosts=ssh_options.known_hosts, ssh_config=str(config),
                         allow_agent=False, look_for_keys=False)
    assert SSHTransport("trainer", options=options).run(["echo", "hi"]).stdout == "hi\n"
    with pytest.raises(HostError) as err:
        SSHTransport("lost", options=options).run(["true"])
    assert f"identity file {tmp_path}/id_gone does not exist" in str(err.value), str(err.value)
    assert "IdentityFile in ~/.ssh/config" in str(err.value) and "cannot connect" not in str(err.value)


def test_jump_host_field_reaches_a_host_only_the_jump_host_can(jump_host, client_key, user, tmp_path):
    """The task's own ``jump_host`` field (user@address:port); the target refuses direct connects."""
    gate, target = jump_host.jump_sshd, jump_host.target_sshd
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(gate) + sshd.known_hosts_line(target))
    config = tmp_path / "ssh_config"   # only the jump host's key, as an operator would list it
    config.write_text(f"Host {gate.address}\n  IdentityFile {client_key}\n")
    options = SSHOptions(known_hosts=str(known), ssh_config=str(config), allow_agent=False,
                         look_for_keys=False)
    direct = SSHTransport(target.address, port=target.port, identity_file=str(client_key), options=options)
    with pytest.raises(HostError, match="cannot connect"):
        direct.run(["true"])
    via = SSHTransport(target.address, port=target.port, identity_file=str(client_key),
                       jump_host=f"{user}@{gate.address}:{gate.port}", options=options)
    assert via.run(["echo", "jumped"]).stdout == "jumped\n"
    via.close()


def test_a_command_without_an_answer_leaves_the_connections_other_commands_alone(ssh_hosts, client_key,
                                                                                ssh_options):
    """An exec request past answer_timeout_s gives up that command only: a long command on the
    same connection (an export, say) goes on to its end (issue 27)."""
    import dataclasses
    import threading
    import time
    t = transport(ssh_hosts[0], client_key, ssh_options)
    done: list = []
    long = threading.Thread(target=lambda: done.append(t.run(["sh", "-c", "sleep 2; echo done"], timeout=30)))
    long.start()
    time.sleep(0.5)
    # An answer limit no sshd can meet: every new command's exec request goes unanswered in time.
    t.options = dataclasses.replace(ssh_options, answer_timeout_s=1e-6)
    with pytest.raises(HostError) as err:
        t.run(["true"])
    assert "no answer within" in str(err.value)
    long.join(30)
    assert done and done[0].stdout == "done\n", done
    t.options = ssh_options
    assert t.run(["echo", "again"]).stdout == "again\n"
    t.close()
