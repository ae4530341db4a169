"""Held-out accuracy for ``benchmarks/grpo.py``, measured the same way for every model.

* ``text``: agentmath's evaluation harness (``run_eval``, ``hf`` backend, greedy) in the
  ``chatml_tools`` format, the token-exact loop agentmath's GRPO trains in: the native protocol
  rendered as text, byte for byte what the chat template makes of the same conversation;
  accuracy with the harness's bootstrap 95% interval.
* ``native``: the same protocol as TRL's tool loop drives it (chat turns: the
  assistant's ``<tool_call>`` ends its turn, the result comes back as a ``tool`` turn), driven
  by agentmath's chat loop (``run_chat_episode``) over a small adapter that renders the
  conversation with the chat template and parses calls with TRL's response template (the parser
  TRL's loop uses); greedy, graded by the same grader, the same bootstrap interval.

Both take ``samples`` and ``temperature`` too (the start's headroom: ``samples`` = k episodes
a problem at the RL temperature); then ``accuracy`` is the mean over every sample and
``pass@k`` (k = ``samples``) the share of problems with at least one correct sample.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentmath.backends.base import SamplingParams
from agentmath.config import EvalConfig, LoopConfig, SandboxConfig


class HFChat:
    """A ``chat`` method (what the chat loop needs) on top of agentmath's batching HF backend."""

    name = "hf-chat"  # the Backend protocol's name, recorded on each trajectory

    def __init__(self, backend: Any) -> None:
        from trl.chat_template_utils import qwen3_template

        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.tokenizer.response_template = qwen3_template

    async def chat(self, messages: list[dict[str, Any]], *,
                   tools: list[dict[str, Any]] | None = None, max_tokens: int = 1024,
                   sampling: SamplingParams | None = None, **_: Any) -> dict[str, Any]:
        from trl.chat_template_utils import parse_response

        prompt = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                    add_generation_prompt=True)
        ids = await self.backend.tokenize(prompt)
        gen = await self.backend.generate(ids, stop=[], max_tokens=max_tokens,
                                          sampling=sampling or SamplingParams())
        # TRL's own parser (falls back to plain text when a call is malformed), as its loop
        parsed = parse_response(self.tokenizer, gen.token_ids, prefix=ids, tools=tools)
        calls = []
        for i, call in enumerate(parsed.get("tool_calls") or []):
            fn = call.get("function") or {}
            args = fn.get("arguments")
            calls.append({"id": f"call_{i}", "type": "function", "function": {
                "name": fn.get("name"),
                "arguments": args if isinstance(args, str) else json.dumps(args)}})
        message: dict[str, Any] = {"role": "assistant", "content": parsed.get("content") or ""}
        if calls:
            message["tool_calls"] = calls
        return {**message, "finish_reason": "length" if gen.finish_reason == "length"
                else "stop", "token_ids": gen.token_ids,
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(gen.token_ids)}}


async def eval_text(model_dir: str, data: Path, out: Path, *, limit: int, max_tokens: int,
                    max_tool_calls: int, seed: int, system: str, samples: int = 1,
                    temperature: float = 0.0) -> dict[str, Any]:
    """``run_eval`` in the chatml_tools format under ``system`` (the native records' prompt:
    see grpo.chatml_system_prompt); accuracy, its CI and the tool figures."""
    from agentmath.backends.hf import HFBackend
    from agentmath.eval.runner import run_eval

    cfg = EvalConfig(dataset=str(data), model=model_dir, backend="hf", samples=samples,
                     limit=limit, format="chatml_tools", temperature=temperature, seed=seed,
                     concurrency=64,
                     loop=LoopConfig(max_model_tokens=max_tokens, max_tool_calls=max_tool_calls,
                                     system_prompt=system))
    backend = HFBackend(model_dir, max_batch=64)
    try:
        metrics = (await run_eval(cfg, out, backend)).metrics.to_dict()
    finally:
        await backend.aclose()
    tools = metrics["tools"]
    result = {"accuracy": metrics["avg"]["value"], "ci95": metrics["avg"]["ci95"],
              "n": metrics["n_samples"], "tool_calls_per_sample": tools["calls_per_sample"],
              "tool_error_rate": tools["error_rate"],
              "model_tokens_mean": metrics["tokens"]["model_mean"]}
    if samples > 1:
        result.update({"problems": metrics["n_problems"], "temperature": temperature,
                       f"pass@{samples}": metrics["pass"][str(samples)]})
    return result


async def eval_native(model_dir: str, rows: list[dict[str, Any]], *, limit: int,
                      max_tokens: int, max_tool_calls: int, seed: int, samples: int = 1,
                      temperature: float = 0.0) -> dict[str, Any]:
    """The chat loop with native tool calls on the first ``limit`` rows, ``samples`` episodes
    each (greedy by default; sampled episodes are seeded one by one)."""
    from agentmath import grading
    from agentmath.agent.loop import run_chat_episode
    from agentmath.backends.hf import HFBackend
    from agentmath.eval.metrics import score_summary
    from agentmath.sandbox import SandboxPool

    backend = HFBackend(model_dir, max_batch=64)
    chat = HFChat(backend)
    loop = LoopConfig(max_model_tokens=max_tokens, max_tool_calls=max_tool_calls)
    rows = rows[:limit]
    jobs = [(i, j) for i in range(len(rows)) for j in range(samples)]
    try:
        async with SandboxPool(SandboxConfig()) as pool:
            trajs = await asyncio.gather(*(
                run_chat_episode(rows[i]["problem"], chat, pool, loop, SamplingParams(
                    temperature=temperature, seed=seed if samples == 1
                    else seed * 100_003 + i * samples + j)) for i, j in jobs))
    finally:
        await backend.aclose()
    correct = [0] * len(rows)
    for (i, _), traj in zip(jobs, trajs, strict=True):
        result = await grading.agrade(str(rows[i]["answer"]), traj.model_text)
        correct[i] += bool(result.correct)
    summary = score_summary([c / samples for c in correct], seed=seed)
    calls = sum(len(t.tool_calls) for t in trajs)
    n = max(1, len(trajs))
    result = {"accuracy": summary["value"], "ci95": summary["ci95"], "n": len(trajs),
              "tool_calls_per_sample": calls / n,
              "tool_error_rate": sum(t.num_tool_errors for t in trajs) / calls if calls else 0.0,
              "model_tokens_mean": sum(t.model_tokens for t in trajs) / n}
    if samples > 1:
        result.update({"problems": len(rows), "temperature": temperature,
                       f"pass@{samples}": sum(c > 0 for c in correct) / max(1, len(rows))})
    return result
