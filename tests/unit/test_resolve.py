"""backend.hosts.resolve and the TF_CONFIG addresses built from it: an alias becomes the HostName
every worker can dial, or the address the operator set."""
from __future__ import annotations

import pytest

from backend.errors import ConsoleError
from backend.hosts.resolve import resolve, split_hops, split_jump, tf_addresses, tf_hosts
from backend.config.spec import cluster_from_dict
from backend.config.tfconfig import address_rows, all_tf_configs, check_cluster

CONFIG = """\
Host h2
    HostName 10.0.0.7
    Port 2222
Host h3
    HostName 10.0.0.8
    ProxyJump alice@[2001:db8::1]:2200
    HostKeyAlias h3-key
Host nojump
    ProxyJump none
Host *
    User operator
    IdentityFile ~/.ssh/cluster_key
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "ssh_config"
    path.write_text(CONFIG)
    return str(path)


def test_alias_applies_hostname_port_user_key(config):
    v = resolve("h2", ssh_config=config)
    assert (v.alias, v.hostname, v.port, v.user, v.jump) == ("h2", "10.0.0.7", 2222, "operator", None)
    assert v.key_files[0].endswith("/.ssh/cluster_key") and "~" not in v.key_files[0]
    assert v.known_hosts_name == "[10.0.0.7]:2222"
    assert v.label == "h2 (10.0.0.7:2222)"


def test_values_on_the_task_win_over_the_config(config):
    v = resolve("h2", port=22, user="bob", identity_file="/k", jump_host="gate", ssh_config=config)
    assert (v.hostname, v.port, v.user, v.key_files, v.jump) == ("10.0.0.7", 22, "bob", ("/k",), "gate")
    assert v.known_hosts_name == "10.0.0.7"


def test_jump_and_host_key_alias(config):
    v = resolve("h3", ssh_config=config)
    assert v.jump == "alice@[2001:db8::1]:2200"
    assert v.known_hosts_name == "h3-key"
    assert resolve("nojump", ssh_config=config).jump is None


def test_a_name_not_in_the_config_is_itself(config):
    v = resolve("10.1.2.3", ssh_config=config)
    assert (v.hostname, v.port, v.label) == ("10.1.2.3", 22, "10.1.2.3:22")


def test_no_config_file(tmp_path):
    assert resolve("h2", ssh_config=str(tmp_path / "none")).hostname == "h2"


def test_unreadable_config_is_our_error(tmp_path):
    bad = tmp_path / "bad_config"
    bad.write_text("Host h2\n  ProxyCommand\n")
    with pytest.raises(ConsoleError, match="ssh_config"):
        resolve("h2", ssh_config=str(bad))


def test_split_jump_forms():
    assert split_jump("alice@[2001:db8::1]:2222") == ("alice", "2001:db8::1", 2222)
    assert split_jump("[2001:db8::1]") == (None, "2001:db8::1", None)
    assert split_jump("bob@gate:2200") == ("bob", "gate", 2200)
    assert split_jump("gate") == (None, "gate", None)
    assert split_hops("a,b,c") == ("a,b", "c") and split_hops("c") == (None, "c")
    with pytest.raises(ConsoleError):
        split_jump("gate:notaport")


def cluster(*tasks: dict):
    return cluster_from_dict({"tasks": list(tasks)})


def test_tf_config_carries_the_hostname_not_the_alias(config):
    c = cluster({"role": "chief", "host": "h2", "tf_port": 24041},
                {"role": "worker", "host": "h3", "tf_port": 24042},
                {"role": "worker", "host": "h2", "tf_port": 24043, "address": "192.168.5.7"})
    assert tf_addresses(c, config) == ["10.0.0.7:24041", "10.0.0.8:24042", "192.168.5.7:24043"]
    cfg = all_tf_configs(c, tf_addresses(c, config))["worker-1"]
    assert cfg == {"cluster": {"chief": ["10.0.0.7:24041"], "worker": ["10.0.0.8:24042", "192.168.5.7:24043"]},
                   "task": {"type": "worker", "index": 1}}
    assert address_rows(c, tf_addresses(c, config))[0] == {"task": "chief-0", "host": "h2:24041",
                                                           "address": "10.0.0.7:24041"}


def test_local_tasks_and_ipv6_addresses(config):
    c = cluster({"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": 2000},
                {"role": "worker", "host": "h2", "tf_port": 2001, "address": "fd00::7"})
    assert tf_addresses(c, config) == ["127.0.0.1:2000", "[fd00::7]:2001"]


def test_an_alias_and_its_hostname_are_one_machine(config):
    c = cluster({"role": "chief", "host": "h2", "tf_port": 24041},
                {"role": "worker", "host": "10.0.0.7", "tf_port": 24041})
    assert not [f for f in check_cluster(c) if f.level == "error"]   # as written they differ
    errors = [f for f in check_cluster(c, tf_hosts(c, config)) if f.level == "error"]
    assert errors and errors[0].field == "tasks[1].tf_port"


def test_names_under_localhost_are_loopback():
    c = cluster({"role": "chief", "host": "a.localhost", "tf_port": 2000},
                {"role": "worker", "host": "gpu-b", "tf_port": 2000})
    assert [f.field for f in check_cluster(c) if f.level == "error"] == ["tasks[0].host"]
