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

:func:`evaluate_all` runs a list of evaluations, each model in both protocols; in a smoke run
(``--quick``) all of them on one sandbox pool, whose start (the zygote's preloaded modules)
costs more than a smoke run's evaluation itself; otherwise each protocol of each model with a
pool of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from agentmath.backends.base import SamplingParams
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.eval.config import EvalConfig


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
                    temperature: float = 0.0, pool: Any = None) -> dict[str, Any]:
    """``run_eval`` in the chatml_tools format under ``system`` (the native records' prompt:
    see grpo.chatml_system_prompt); accuracy, its CI and the tool figures. ``pool``: a
    sandbox pool to run on (None: one of its own)."""
    from agentmath.backends.hf import HFBackend
    from agentmath.eval.runner import run_eval

    cfg = EvalConfig(dataset=str(data), model=model_dir, backend="hf", samples=samples,
                     limit=limit, format="chatml_tools", temperature=temperature, seed=seed,
                     concurrency=64,
                     loop=LoopConfig(max_model_tokens=max_tokens, max_tool_calls=max_tool_calls,
                                     system_prompt=system))
    backend = HFBackend(model_dir, max_batch=64)
    try:
        metrics = (await run_eval(cfg, out, backend, sandbox=pool)).metrics.to_dict()
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
                      temperature: float = 0.0, pool: Any = None) -> dict[str, Any]:
    """The chat loop with native tool calls on the first ``limit`` rows, ``samples`` episodes
    each (greedy by default; sampled episodes are seeded one by one). ``pool``: a sandbox
    pool to run on (None: one of its own)."""
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
        async with SandboxPool(SandboxConfig()) if pool is None else nullcontext(pool) as sandbox:
            trajs = await asyncio.gather(*(
                run_chat_episode(rows[i]["problem"], chat, sandbox, loop, SamplingParams(
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


def _arguments(ns: argparse.Namespace, test: Path, samples: int, temperature: float,
               limit: int | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The held-out rows and the keyword arguments both evaluations take."""
    rows = [json.loads(line) for line in test.read_text().splitlines() if line.strip()]
    return rows, {"limit": limit or ns.eval_problems, "max_tokens": ns.max_completion,
                  "max_tool_calls": ns.max_tool_calls, "seed": ns.seed, "samples": samples,
                  "temperature": temperature}


async def evaluate(ns: argparse.Namespace, model_dir: str, test: Path, out: Path, *,
                   samples: int = 1, temperature: float = 0.0, limit: int | None = None,
                   pool: Any = None) -> dict[str, Any]:
    """Held-out accuracy of ``model_dir`` in both protocols (``samples`` each, greedy by
    default) on the first ``limit`` (default ``--eval-problems``) problems, under the system
    prompt grpo.chatml_system_prompt derived (``ns.system_prompt``, checked once in run);
    on ``pool`` (None: a pool of its own for each protocol)."""
    rows, kw = _arguments(ns, test, samples, temperature, limit)
    result = {"text": await eval_text(model_dir, test, out / "eval-text",
                                      system=ns.system_prompt, pool=pool, **kw)}
    if not ns.no_native_eval:
        result["native"] = await eval_native(model_dir, rows, pool=pool, **kw)
    return result


def _evaluate_apart(ns: argparse.Namespace, model_dir: str, test: Path, out: Path, *,
                    samples: int = 1, temperature: float = 0.0,
                    limit: int | None = None) -> dict[str, Any]:
    """:func:`evaluate` with each protocol on an event loop (and a pool) of its own: how the
    full benchmark evaluates."""
    rows, kw = _arguments(ns, test, samples, temperature, limit)
    result = {"text": asyncio.run(eval_text(model_dir, test, out / "eval-text",
                                            system=ns.system_prompt, **kw))}
    if not ns.no_native_eval:
        result["native"] = asyncio.run(eval_native(model_dir, rows, **kw))
    return result


def evaluate_all(ns: argparse.Namespace,
                 jobs: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each job (a line for the log, :func:`evaluate`'s arguments after ``ns``, its keyword
    arguments) in turn: with ``ns.quick`` all on one event loop and one sandbox pool, else
    each protocol on a loop and a pool of its own."""
    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if not ns.quick:
        out = []
        for line, args, kw in jobs:
            log(line)
            out.append(_evaluate_apart(ns, *args, **kw))
        return out

    async def shared() -> list[dict[str, Any]]:
        from agentmath.sandbox import SandboxPool

        found = []
        async with SandboxPool(SandboxConfig()) as pool:
            for line, args, kw in jobs:
                log(line)
                found.append(await evaluate(ns, *args, **kw, pool=pool))
        return found

    return asyncio.run(shared())
