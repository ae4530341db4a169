"""Sharded training's settings, launch checks and memory estimate (agentmath/train/sharding.py,
agentmath/sim/train_memory.py); the sharded run itself: tests/integration/test_sft_fsdp.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentmath.errors import ConfigError, DataError
from agentmath.sim.train_memory import GIB, QWEN3_4B, fsdp_rank_memory
from agentmath.train import sharding
from agentmath.train.sft import SFTConfig


def test_sharding_settings_have_bounds() -> None:
    config = SFTConfig(sharding="fsdp", fsdp={"wrap_class": "Qwen3DecoderLayer",
                                              "activation_checkpointing": True})
    assert config.fsdp.wrap_class == "Qwen3DecoderLayer" and config.fsdp.reshard_after_forward
    assert SFTConfig().sharding == "none"
    with pytest.raises(ValidationError, match="sharding"):
        SFTConfig(sharding="zero3")
    with pytest.raises(ValidationError, match="reduce_dtype"):
        SFTConfig(fsdp={"reduce_dtype": "float16"})
    with pytest.raises(ValidationError, match="wrap_class"):
        SFTConfig(fsdp={"wrap_class": ""})


def test_several_processes_need_sharding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(ConfigError, match="launched as 8 processes but sharding is 'none'"):
        sharding.check_launch("none", "sft")
    sharding.check_launch("fsdp", "sft")
    monkeypatch.setenv("WORLD_SIZE", "1")
    sharding.check_launch("none", "sft")


def test_a_step_must_split_evenly(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from agentmath.train.sft import _device

    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(DataError, match="6 examples a step cannot be shared evenly by 4"):
        _device(SFTConfig(sharding="fsdp", batch_size=3, grad_accum=2, device="cpu"))


def test_each_rank_gets_every_nth_example(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmath.train.sft_order import rank_share

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert rank_share([[0, 1, 2, 3], [4, 5, 6, 7]], 4) == [[1, 3, 5, 7]]
    monkeypatch.setenv("RANK", "0")
    assert rank_share([[0, 1], [2, 3], [4, 5]], 2) == [[0, 2], [4]]


def test_the_wrapped_layers_are_the_models_decoder_layers() -> None:
    pytest.importorskip("transformers")
    import transformers

    from tests.fixtures.qwen3_like import qwen3_like_dir

    model = transformers.AutoModelForCausalLM.from_pretrained(str(qwen3_like_dir("qwen3")))
    assert sharding.layer_classes(model, None) == {"Qwen3DecoderLayer"}
    assert sharding.layer_classes(model, "Qwen3MLP") == {"Qwen3MLP"}


def test_resuming_across_sharding_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from agentmath.train.plumbing import OPTIMIZER_BY_NAME, restore_state

    state = {OPTIMIZER_BY_NAME: True, "optimizer": {}, "scheduler": {}, "rng": {}}
    with pytest.raises(ConfigError, match="saved with sharding 'fsdp', this run has 'none'"):
        restore_state(tmp_path, state, None, None)
    with pytest.raises(ConfigError, match="saved with sharding 'none', this run has 'fsdp'"):
        restore_state(tmp_path, {**state, OPTIMIZER_BY_NAME: False}, None, None,
                      load_by_name=lambda sd: None)


def test_memory_estimate_of_a_4b_model_on_8_gpus() -> None:
    est = fsdp_rank_memory(QWEN3_4B, ranks=8, tokens_per_rank=8192)
    # float32 master shard + gradient shard + AdamW's two moments: 16 bytes a parameter / 8
    assert est.weights + est.gradients + est.optimizer == pytest.approx(16 * 4.02e9 / 8)
    assert est.logits == 2 * 4 * 151_936 * 8192
    unsharded = fsdp_rank_memory(QWEN3_4B, ranks=1)
    assert unsharded.optimizer == 8 * est.optimizer
    no_ckpt = fsdp_rank_memory(QWEN3_4B, activation_checkpointing=False)
    assert no_ckpt.activations > 10 * est.activations
    lora = fsdp_rank_memory(QWEN3_4B, lora_params=33e6)
    assert lora.optimizer == pytest.approx(8 * 33e6 / 8)
    assert est.total < 24 * GIB and unsharded.total > 3 * est.total
    assert set(est.gib()) >= {"weights", "activations", "logits", "total"}


def _rl(**over: object) -> dict[str, object]:
    return {"model": "m", "data": {"dataset": "d.jsonl"}, **over}


def test_rl_sharding_settings() -> None:
    from agentmath.rl.config import RLConfig

    config = RLConfig.model_validate(_rl(optim={"sharding": "fsdp", "bf16": True,
                                                "fsdp": {"cpu_offload": True}},
                                         loss={"share_prompt": 0}))
    assert config.optim.sharding == "fsdp" and config.optim.fsdp.cpu_offload
    assert RLConfig.model_validate(_rl()).optim.sharding == "none"
    # a shared prompt runs each layer twice before one backward: FSDP frees the gathered
    # weights after the first, so sharded rows are trained whole
    with pytest.raises(ValidationError, match="loss.share_prompt: with optim.sharding 'fsdp'"):
        RLConfig.model_validate(_rl(optim={"sharding": "fsdp"}))


def test_a_sharded_rl_rank_shares_the_micro_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmath.rl.update import _rank_share

    batches: list = ["a", "b", "c"]
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert _rank_share(batches) == (["a", "c"], 2)
    monkeypatch.setenv("RANK", "1")
    assert _rank_share(batches) == (["b", "b"], 1)  # a stand-in keeps the collectives in step
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert _rank_share(batches) == (["a"], 0)  # nothing of its own: the first, as a stand-in
