"""``--set`` overrides (agentmath.config.apply_overrides): sections, list items, errors."""

from __future__ import annotations

import pytest

from agentmath.config import apply_overrides
from agentmath.errors import ConfigError

BASE = {"rewards": [{"name": "accuracy", "weight": 1.0}, {"name": "tool_error"}],
        "stages": {"stages": [{"max_tool_calls": 4}, {"max_tool_calls": 8}]}}


@pytest.mark.parametrize("key", ["rewards[1].weight", "rewards.1.weight"])
def test_a_list_item_is_addressed_by_index(key: str) -> None:
    out = apply_overrides(BASE, [f"{key}=0.5"])
    assert out["rewards"][1] == {"name": "tool_error", "weight": 0.5}
    assert BASE["rewards"][1] == {"name": "tool_error"}  # the input is left as it was


def test_nested_lists_and_whole_items() -> None:
    out = apply_overrides(BASE, ["stages.stages[0].segment_tokens=512",
                                 'rewards[0]={"name": "deepmath"}'])
    assert out["stages"]["stages"][0] == {"max_tool_calls": 4, "segment_tokens": 512}
    assert out["rewards"][0] == {"name": "deepmath"}
    grid = apply_overrides({"m": [[1, 2], [3, 4]]}, ["m[1][0]=9"])
    assert grid == {"m": [[1, 2], [9, 4]]}


@pytest.mark.parametrize(("override", "message"), [
    ("rewards[2].weight=1", r"index 2 is out of range \(the list has 2 items\)"),
    ("rewards[x].weight=1", r"'rewards\[x\]' is not a field name"),
    ("rewards[1.weight=1", r"is not a field name"),
    ("loss[0].clip=1", r"'loss' is not set in the config.*loss=\[\.\.\.\]"),
    ("rewards[0].name.x=1", r"'name' is not a section"),
])
def test_bad_paths_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        apply_overrides(BASE, [override])


def test_rl_config_takes_a_list_item_override(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from agentmath.cli._common import build_config
    from agentmath.rl.config import RLConfig

    path = tmp_path / "rl.toml"
    path.write_text('model = "m"\n[data]\ndataset = "d.jsonl"\n[[rewards]]\nname = "accuracy"\n'
                    '[[rewards]]\nname = "tool_error"\nweight = 1.0\n')
    cfg = build_config(RLConfig, "rl", path, ["rl.rewards[1].weight=0.25"], {}, section="rl")
    assert [(r.name, r.weight) for r in cfg.rewards] == [("accuracy", 1.0), ("tool_error", 0.25)]
