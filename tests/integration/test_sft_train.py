"""A few real SFT runs on a nano model: loss falls, checkpoints, exact resume, LoRA, the CLI."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from agentmath.cli.main import app  # noqa: E402
from agentmath.models.tiny import build_model, build_tokenizer  # noqa: E402
from agentmath.train.sft import SFTConfig, train_sft  # noqa: E402
from tests.fixtures.corpus import synthetic_conversations  # noqa: E402

pytestmark = pytest.mark.integration


def _examples(n: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` trajectories in the converter's format: code, masked interpreter output, answer."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 9)
        out.append({"id": f"p{i}", "answer": str(a * b), "messages": [
            {"role": "system", "content": "Solve the problem."},
            {"role": "user", "content": f"What is {a} * {b}?"}], "completion": [
            {"text": f"I compute it.\n<code>\nprint({a} * {b})\n</code>", "train": True},
            {"text": f"\n<interpreter>\n{a * b}\n</interpreter>\n", "train": False},
            {"text": f"The answer is \\boxed{{{a * b}}}.", "train": True}]})
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved nano model + tokenizer directory."""
    path = tmp_path_factory.mktemp("nano")
    tok = build_tokenizer(synthetic_conversations(120), vocab_size=512)
    build_model(tok, "nano", out_dir=path, seed=0)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "sft.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in _examples()))
    return path


def _config(**kw: Any) -> SFTConfig:
    values = {"learning_rate": 3e-3, "max_steps": 8, "batch_size": 4, "grad_accum": 2,
              "warmup_steps": 2, "checkpoint_every": 4, "keep_checkpoints": 0, "seed": 1,
              "device": "cpu"}
    return SFTConfig(**{**values, **kw})


def _log(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "loss.jsonl").read_text().splitlines()]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.fixture(scope="module")
def full_run(base: Path, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An uninterrupted 8-step full fine-tuning run (the reference for resume)."""
    out = tmp_path_factory.mktemp("full")
    return train_sft(_config(), data, base, out, progress=False), out


def test_loss_falls_and_checkpoints_are_written(full_run: Any) -> None:
    from transformers import AutoModelForCausalLM

    result, out = full_run
    log = _log(out)
    assert [r["step"] for r in log] == list(range(1, 9))
    assert all(r["tokens"] > 0 and r["lr"] > 0 for r in log)
    assert log[-1]["loss"] < log[0]["loss"] - 0.5
    assert result.steps == 8 and result.final_loss == pytest.approx(log[-1]["loss"])
    assert result.trainable_tokens == sum(r["tokens"] for r in log)
    assert result.examples == {"total": 20, "kept": 20, "truncated": 0, "dropped": 0}
    for step in (4, 8):
        ckpt = out / f"checkpoint-{step}"
        assert (ckpt / "trainer_state.pt").exists() and (ckpt / "tokenizer.json").exists()
    assert result.final_dir == str(out / "final") and result.adapter_dir is None
    model = AutoModelForCausalLM.from_pretrained(result.final_dir)
    assert torch.equal(model.state_dict()["model.embed_tokens.weight"],
                       _weights(out / "final")["model.embed_tokens.weight"])


def test_killed_run_resumes_exactly(base: Path, data: Path, tmp_path: Path,
                                    full_run: Any) -> None:
    reference, ref_out = full_run
    killed = train_sft(_config(), data, base, tmp_path, progress=False, stop_after=6)
    assert killed.steps == 6 and killed.final_dir is None  # "killed" after step 6
    assert [r["step"] for r in _log(tmp_path)] == list(range(1, 7))
    resumed = train_sft(_config(), data, base, tmp_path, progress=False)
    assert resumed.resumed_from == 4  # the newest checkpoint; steps 5-6 are redone
    log = _log(tmp_path)
    assert [r["step"] for r in log] == list(range(1, 9))
    assert [r["loss"] for r in log] == [r["loss"] for r in _log(ref_out)]  # bit-exact on CPU
    assert resumed.trainable_tokens == reference.trainable_tokens
    ours, theirs = _weights(tmp_path / "final"), _weights(ref_out / "final")
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_longer_run_continues_from_the_last_step(base: Path, data: Path,
                                                 tmp_path: Path) -> None:
    first = train_sft(_config(max_steps=4), data, base, tmp_path, progress=False)
    assert first.steps == 4
    second = train_sft(_config(max_steps=6), data, base, tmp_path, progress=False)
    assert second.resumed_from == 4 and second.steps == 6
    assert [r["step"] for r in _log(tmp_path)] == [1, 2, 3, 4, 5, 6]
    restarted = train_sft(_config(max_steps=2), data, base, tmp_path, progress=False,
                          resume=False)
    assert restarted.resumed_from is None and [r["step"] for r in _log(tmp_path)] == [1, 2]


def test_lora_trains_and_the_merged_model_loads(base: Path, data: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    config = _config(lora=True, lora_r=8, learning_rate=1e-2, checkpoint_every=3, max_steps=6)
    result = train_sft(config, data, base, tmp_path, progress=False)
    log = _log(tmp_path)
    assert log[-1]["loss"] < log[0]["loss"]
    assert (Path(result.adapter_dir) / "adapter_config.json").exists()
    assert (tmp_path / "checkpoint-3" / "adapter_model.safetensors").exists()
    merged = AutoModelForCausalLM.from_pretrained(result.final_dir)
    names = set(merged.state_dict())
    assert not any("lora" in n for n in names)
    before, after = _weights(base), _weights(Path(result.final_dir))
    assert not torch.equal(before["model.layers.0.self_attn.q_proj.weight"],
                           after["model.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    again = train_sft(config, data, base, tmp_path, progress=False, resume=True)
    assert again.resumed_from == 6 and again.steps == 6  # nothing left to do


def test_cli_json(base: Path, data: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "sft", "--data", str(data), "--model", str(base), "--out", str(tmp_path / "run"),
        "--max-steps", "2", "--lr", "1e-3", "--batch-size", "2", "--seed", "3",
        "--set", "checkpoint_every=0", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["steps"] == 2 and payload["checkpoints"] == []
    assert Path(payload["final_dir"], "config.json").exists()
    config = json.loads((tmp_path / "run" / "sft_config.json").read_text())["config"]
    assert config["seed"] == 3 and config["batch_size"] == 2 and config["lora"] is False


def test_cli_errors(base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}], "completion": "x"}\n')
    args = ["sft", "--data", str(bad), "--model", str(base), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "bad.jsonl:1" in result.output
    result = CliRunner().invoke(app, [*args, "--set", "learning_rate=-1"])
    assert result.exit_code == 2 and "learning_rate" in result.output
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "agentmath[train]" in result.output
