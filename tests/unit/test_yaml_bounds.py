"""Hostile YAML is refused fast, with a SpecError naming the file and the bound it broke.

Issue 27: a 400-byte file of nested anchors (billion laughs) took seconds to minutes to validate,
because the error message built the full repr of the expanded list; deep nesting raised
RecursionError. pytest-timeout bounds each test; none needs more than a fraction of a second.
"""
from __future__ import annotations

import pytest

from backend.config.values import show_value
from backend.config.yaml_files import MAX_YAML_BYTES, load_yaml_text
from backend.errors import ConsoleError, SpecError
from backend.config.spec import cluster_from_dict, load_cluster, load_job
from backend.config.kinds import load_any_cluster


def laughs(levels: int = 9) -> str:
    """The classic: each level a list of nine aliases of the one before (9**levels strings)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        p = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([p] * 9)}]")
    lines.append(f"tasks: *a{levels}")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_by_the_node_bound(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs())
    assert path.stat().st_size < 1000
    with pytest.raises(SpecError) as err:
        load_cluster(path)
    text = str(err.value)
    assert str(path) in text and "nodes" in text and "aliases" in text, text


def test_deep_nesting_is_refused_by_the_depth_bound(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("tasks: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(SpecError) as err:   # was RecursionError, not a ConsoleError
        load_any_cluster(path)
    assert str(path) in str(err.value) and "nested deeper than" in str(err.value), str(err.value)


def test_deep_block_mappings_too(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("".join(" " * i + f"k{i}:\n" for i in range(200)))
    with pytest.raises(SpecError) as err:
        load_job(path)
    assert "nested deeper than" in str(err.value)


def test_a_big_file_is_refused_by_the_size_bound(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * (MAX_YAML_BYTES // 10 + 1))
    with pytest.raises(SpecError) as err:
        load_cluster(path)
    assert str(path) in str(err.value) and "1 MiB" in str(err.value), str(err.value)


def test_an_upload_is_named_in_the_message():
    with pytest.raises(SpecError) as err:
        load_yaml_text("a: [" * 10_000, "upload.yaml")
    assert "upload.yaml is nested deeper than" in str(err.value), str(err.value)


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(SpecError) as err:
        load_yaml_text("tasks: &t [*t]\n", "loop.yaml")
    assert "loop.yaml has an alias that contains itself" in str(err.value)


def test_ordinary_anchors_still_load():
    data = load_yaml_text("base: &b {host: n1, tf_port: 2000, role: worker}\ntasks: [*b]\n", "x.yaml")
    assert cluster_from_dict({"tasks": data["tasks"]}).tasks[0].host == "n1"


@pytest.mark.timeout(20)
def test_messages_show_a_bounded_repr_of_a_huge_value():
    """The validation of already-parsed data (a form, a Python caller) has its own bound: each
    message shows a few items of a value, never its full repr (9**8 strings per task here)."""
    import yaml
    data = yaml.safe_load(laughs())       # shared lists: built fast; the old repr ran for minutes
    with pytest.raises(ConsoleError) as err:
        cluster_from_dict(data)
    assert "tasks[8]: expected a mapping, got [[[[...], [...], [...], [...], [...], [...], ...], [[...]..." in str(err.value)
    assert all(len(str(e)) < 200 for e in err.value.errors)
    assert len(show_value(data["tasks"])) <= 60 and show_value(data["tasks"]).endswith("...")
