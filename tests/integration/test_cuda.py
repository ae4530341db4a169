"""The training and generation paths on a CUDA GPU: bf16 SFT, a GRPO run that learns with
bf16 autocast and the in-process generator on the GPU, and the continuous-batching generator on
the GPU against one-at-a-time generation. Skipped where there is no CUDA device (CI has none:
these run on a lent GPU machine, ``pytest -m gpu``)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from agentmath.backends.base import SamplingParams  # noqa: E402
from agentmath.backends.hf import HFBackend  # noqa: E402
from agentmath.models.tiny import build_model, build_tokenizer  # noqa: E402
from agentmath.rl.records import read_steps  # noqa: E402
from agentmath.rl.trainer import train_rl  # noqa: E402
from agentmath.train.sft import SFTConfig, train_sft  # noqa: E402
from tests.fixtures.corpus import synthetic_conversations  # noqa: E402
from tests.integration.test_rl_train import _config as rl_config  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _examples(n: int = 32) -> list[dict[str, Any]]:
    rng = random.Random(0)
    rows = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 9)
        rows.append({"id": f"p{i}", "answer": str(a * b), "messages": [
            {"role": "user", "content": f"What is {a} * {b}?"}], "completion": [
            {"text": f"<code>\nprint({a} * {b})\n</code>", "train": True},
            {"text": f"\n<interpreter>\n{a * b}\n</interpreter>\n", "train": False},
            {"text": f"The answer is \\boxed{{{a * b}}}.", "train": True}]})
    return rows


def test_bf16_sft_on_cuda_lowers_the_loss(tmp_path: Path) -> None:
    tok = build_tokenizer(synthetic_conversations(120), vocab_size=512)
    model = build_model(tok, "nano", seed=0)
    cfg = SFTConfig(learning_rate=3e-3, max_steps=30, batch_size=8, warmup_steps=3, seed=0,
                    checkpoint_every=0, device="cuda", bf16=True)
    result = train_sft(cfg, _examples(), model, tmp_path / "sft", tokenizer=tok,
                       progress=False, resume=False)
    log = [json.loads(line) for line in Path(result.loss_log).read_text().splitlines()]
    losses = [row["loss"] for row in log if "loss" in row]
    assert result.steps == 30 and result.final_dir is not None
    assert all(loss == loss for loss in losses)  # no NaN under bf16
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


def test_grpo_learns_on_cuda_with_bf16(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The CPU test's learnable reward (brevity) rises on the GPU too, with the in-process
    generator on the GPU and the update under bf16 autocast."""
    cfg = rl_config(tiny_model_dir, device="cuda", optim__bf16=True)
    result = train_rl(cfg, tmp_path / "run", progress=False)
    rows = read_steps(result.metrics)
    first = sum(r.reward_mean for r in rows[:2]) / 2
    last = sum(r.reward_mean for r in rows[-2:]) / 2
    assert last > first + 0.1, [round(r.reward_mean, 3) for r in rows]
    assert all(r.grad_norm == r.grad_norm for r in rows)  # finite under bf16


def test_continuous_generator_on_cuda_matches_one_at_a_time() -> None:
    tok = build_tokenizer(synthetic_conversations(120), vocab_size=512)
    model = build_model(tok, "nano", seed=0).eval()
    texts = synthetic_conversations(8, seed=1)
    prompts = [tok.encode(t, add_special_tokens=False)[: 6 + 12 * i]
               for i, t in enumerate(texts)]
    greedy = SamplingParams(temperature=0, logprobs=True)

    async def run(backend: HFBackend, together: bool) -> list[list[int]]:
        try:
            calls = [backend.generate(p, stop=(), max_tokens=24 + 4 * i, sampling=greedy)
                     for i, p in enumerate(prompts)]
            outs = (await asyncio.gather(*calls) if together
                    else [await c for c in calls])
            return [o.token_ids for o in outs]
        finally:
            await backend.aclose()

    alone = asyncio.run(run(HFBackend(model, tok, max_batch=1, continuous=False,
                                      device="cuda"), together=False))
    batched = asyncio.run(run(HFBackend(model, tok, max_batch=8, device="cuda"),
                              together=True))
    assert next(model.parameters()).device.type == "cuda"
    assert batched == alone


def test_a_cpu_run_on_a_gpu_machine_keeps_its_generator_on_the_cpu(tmp_path: Path) -> None:
    """``device: cpu`` holds for the in-process generator too (it used to pick cuda whenever
    there was one, moving the shared model away from the CPU trainer)."""
    tok = build_tokenizer(synthetic_conversations(120), vocab_size=512)
    build_model(tok, "nano", out_dir=tmp_path / "model", seed=0)
    (tmp_path / "test.jsonl").write_text("".join(
        json.dumps({"id": f"p{i}", "problem": f"What is {i} + 2?", "answer": str(i + 2)}) + "\n"
        for i in range(8)))
    cfg = rl_config(tmp_path / "model", device="cpu", steps=1, prompts_per_step=2,
                    group_size=2, rewards=[{"name": "tests.integration.test_rl_train:brevity",
                                            "weight": 1.0}])
    result = train_rl(cfg, tmp_path / "run", progress=False)
    assert result.steps == 1 and len(read_steps(result.metrics)) == 1


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_a_shared_prompt_on_cuda_gives_the_rows_logprobs(bf16: bool) -> None:
    """The update's shared-prompt forward (loss.share_prompt) on the GPU: the trained tokens'
    log-probabilities are those of the whole rows (fp32 to 1e-4; bf16 autocast to 0.05)."""
    from agentmath.rl.batch import TrainSample, collate_samples, shared_prefix
    from agentmath.rl.update import forward_logprobs

    tok = build_tokenizer(synthetic_conversations(40), vocab_size=300)
    model = build_model(tok, "nano", seed=0).to("cuda")
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 290, (37,), generator=g).tolist()
    samples = []
    for n in (12, 30, 5, 21):
        ids = prompt + torch.randint(3, 290, (n,), generator=g).tolist()
        samples.append(TrainSample(ids, [0] * 37 + [1] * n, [-0.5] * len(ids), 1.0, 1.0))
    whole = collate_samples(samples, pad_id=0).to("cuda")
    split = collate_samples(samples, pad_id=0, prefix=shared_prefix(samples)).to("cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        whole_logp = forward_logprobs(model, whole)[1][whole.mask]
        split_logp = forward_logprobs(model, split)[1][split.mask]
    assert torch.allclose(whole_logp, split_logp, atol=0.05 if bf16 else 1e-4)


def test_lora_grpo_on_cuda_with_bf16_and_a_shared_prompt(tiny_model_dir: Path,
                                                         tmp_path: Path) -> None:
    """DeepMath's recipe shape on the GPU: a LoRA adapter trained by GRPO under bf16 autocast,
    every group's prompt run once (share_prompt 1: whatever the tiny prompts' length); the
    merged model differs from the base in linear layers only."""
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    cfg = rl_config(tiny_model_dir, steps=2, device="cuda", optim__bf16=True,
                    optim__lora=True, optim__lora_r=4, optim__learning_rate=1e-2,
                    loss__share_prompt=1)
    result = train_rl(cfg, tmp_path / "lora", progress=False)
    rows = read_steps(result.metrics)
    assert result.policy_version >= 1 and all(r.grad_norm == r.grad_norm for r in rows)
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    tuned = load_file(str(Path(result.final_dir, "model.safetensors")))
    changed = [k for k in base if not torch.equal(base[k], tuned[k])]
    assert changed and not any("norm" in k for k in changed)
