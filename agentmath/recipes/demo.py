"""The demo recipe: grow tiny models on the CPU; show that tool use beats text alone, that agentic
GRPO measurably improves the tool model, and test DeepMath's choice of training on tool output.

Read top to bottom; each stage is a call into the library:

1. generate seeded multi-step word problems with big numbers, split train / test;
2. code injection: turn each training chain-of-thought into a tool trajectory, executing every
   snippet in the sandbox and keeping only verified ones;
3. build a tokenizer on the training text and two identical tiny Qwen3 models;
4. SFT one on the text chain-of-thought; SFT the other on a **mixture**: ``text_share`` of its
   trajectories do the arithmetic in text, the rest run it as code (tool output masked from the
   loss). The mixed model chooses between text and code with real probability at every step of
   a solution, and only the code path gets 3-4 digit products right: a decision under
   uncertainty that the accuracy reward resolves (RL teaches *when* to use the tool). The
   models are ``nano`` (0.14 M parameters), trained 1,400 steps: 740-860 steps past the point
   at which the tool model learns to copy numbers into code (seeds 0-2), where its pass@k has
   stopped rising; the ``micro`` design before it sat 75-150 steps past a sharper edge, and
   another machine's float kernels moved it (docs/demo.md);
5. measure the start's headroom: greedy pass@1, and pass@k at the RL temperature, on held-out
   problems (RL sharpens what sampling can already sometimes do). Where that point falls
   varies widely with the initialisation and data order, and on some seeds it never comes
   within the budget (seed 3): a start whose pass@k is below ``min_start_pass_at_k`` is grown
   again from other seeds (the remaining ``start_attempts`` side by side), and GRPO starts
   from the first that passes;
6. agentic GRPO from the mixed model on the training problems (accuracy reward, void-turn
   filtering, two budget stages: a tight tool-call budget first, grown automatically when the
   truncation rate passes the threshold), twice: tool output masked from the loss, and NOT
   masked (the ablation);
7. evaluate all four on the held-out problems through the real agent loop, sandbox and
   evaluation harness (with 95% CIs); write the report (comparison, plots, training curves
   with the stage transitions, HTML viewer) and save the best tool model for ``solve``.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath import _loop as event_loop
from agentmath.recipes._parallel import run_parallel, worker_pool
from agentmath.recipes.demo_config import (  # noqa: F401 - the recipe's public names
    FORMAT,
    TEXT_SYSTEM,
    TOOL_SYSTEM,
    DemoConfig,
)
from agentmath.recipes.demo_jobs import (  # noqa: F401 - the recipe's public names
    MAX_TOOL_CALLS,
    eval_job,
    grpo_job,
    rl_config,
    sft_job,
    start_job,
    start_seed,
)
from agentmath.recipes.summary import (
    DemoSummary,
    Headroom,
    ModelRow,
    ReportFiles,
    StartAttempt,
)
from agentmath.rl.records import StageMove
from agentmath.synth.tool_records import Conversion

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor
    from contextlib import AbstractContextManager

    from agentmath.eval.results import RunMetrics


Stage = Callable[[str], None]


def check_device(cfg: DemoConfig) -> None:
    """Fail before any work when ``cfg.device`` names a CUDA device this machine lacks."""
    if not cfg.device.startswith("cuda"):
        return
    from agentmath._lazy import require
    from agentmath.errors import ConfigError

    torch = require("torch", "train")
    index = int(cfg.device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(f"demo device {cfg.device!r}: this machine has "
                          f"{torch.cuda.device_count()} CUDA device(s)")


# imported by the demo's two workers while it prepares its data
WORKER_PRELOAD = ("transformers", "agentmath.train.sft", "agentmath.rl.trainer",
                  "agentmath.eval.runner", "agentmath.backends.hf")


def demo_pool() -> AbstractContextManager[ProcessPoolExecutor | None]:
    """The demo's pool of two workers (:func:`worker_pool`, importing ``WORKER_PRELOAD``)."""
    return worker_pool(2, preload=WORKER_PRELOAD)


def run_demo(cfg: DemoConfig, out: Path, save_model_to: Path | None,
             stage: Stage = print, pool: ProcessPoolExecutor | None = None) -> DemoSummary:
    """Run every stage; returns the summary (also written to ``out/summary.json``). Each
    stage's two jobs run side by side in one pool of two workers kept for the whole demo:
    ``pool`` (a :func:`demo_pool` kept for several demos, whose jobs each seed their own
    RNGs), or one started for this demo."""
    check_device(cfg)
    if pool is not None:
        return _run_stages(cfg, out, save_model_to, stage, pool)
    with demo_pool() as own:
        return _run_stages(cfg, out, save_model_to, stage, own)


@dataclass(frozen=True)
class DemoData:
    """What the demo trains and evaluates on (written under its ``out`` folder)."""

    mixed: list[dict]  # the tool model's SFT records: verified tool trajectories and text
    text_examples: list[dict]  # the text-only model's: every problem as text chain-of-thought
    conversion: Conversion  # the code injection's funnel (kept, dropped, text)
    test_file: Path
    train_file: Path
    tokenizer_dir: Path
    n_test: int


def prepare_data(cfg: DemoConfig, out: Path, stage: Stage = print) -> DemoData:
    """The demo's problems (train/test JSONL), both SFT mixtures and the tokenizer."""
    from agentmath.jsonl import write_jsonl
    from agentmath.models.tiny import build_tokenizer
    from agentmath.synth.inject import text_only_example
    from agentmath.synth.tool_records import tool_records
    from agentmath.tasks.synthetic import make_problems, text_problem_ids, to_task_rows
    from agentmath.train.grow import corpus_texts

    out.mkdir(parents=True, exist_ok=True)
    stage("generating problems")
    train, test = make_problems(cfg.seed, cfg.train_problems, cfg.test_problems, cfg.max_digits)
    write_jsonl(to_task_rows(test), out / "test.jsonl")
    write_jsonl(to_task_rows(train), out / "train.jsonl")
    # the tool model's data: a seeded text_share of the problems as text chain-of-thought
    # (under the tool system prompt), the rest as verified tool trajectories
    text_ids = text_problem_ids(train, cfg.text_share, cfg.seed)
    stage(f"code injection: executing {len(train) - len(text_ids)} trajectories in the "
          f"sandbox ({len(text_ids)} more problems stay text chain-of-thought)")
    mixed, by_format = event_loop.run(tool_records(
        train, [FORMAT], system_prompts={FORMAT: TOOL_SYSTEM}, text_ids=text_ids))
    text_examples = [text_only_example(p, TEXT_SYSTEM) for p in train]
    stage("building the tokenizer and two identical tiny models")
    tokenizer = build_tokenizer(corpus_texts(mixed + text_examples),
                                vocab_size=cfg.vocab_size)
    tokenizer.save_pretrained(str(out / "tokenizer"))
    return DemoData(mixed=mixed, text_examples=text_examples,
                    conversion=by_format[FORMAT],
                    test_file=out / "test.jsonl", train_file=out / "train.jsonl",
                    tokenizer_dir=out / "tokenizer", n_test=len(test))


def _run_stages(cfg: DemoConfig, out: Path, save_model_to: Path | None, stage: Stage,
                pool: ProcessPoolExecutor | None) -> DemoSummary:
    started = time.monotonic()
    prepared = prepare_data(cfg, out, stage)
    mixed, text_examples, n_test = prepared.mixed, prepared.text_examples, prepared.n_test
    data = cfg.model_dump()
    stage(f"SFT of the text-only and the tool model side by side ({cfg.steps} steps each; the "
          f"tool model's data: {1 - cfg.text_share:.0%} code, {cfg.text_share:.0%} text)")
    test_file, tokenizer_dir = str(prepared.test_file), str(prepared.tokenizer_dir)
    (text_dir, text_metrics), (tool_dir, _) = run_parallel(sft_job, pool=pool, jobs=[
        (data, text_examples, tokenizer_dir, str(out / "model-text-only"), TEXT_SYSTEM,
         (test_file, str(out / "run-text-only"))),
        (data, mixed, tokenizer_dir, str(out / "model-tool"), TOOL_SYSTEM)])
    models = {"text-only": text_dir}
    stage(f"the tool model's headroom: greedy on {n_test} held-out problems, pass@"
          f"{cfg.headroom_k} at temperature {cfg.rl_temperature} on "
          f"{min(cfg.headroom_problems, n_test)}")
    greedy, sampled = run_parallel(eval_job, pool=pool, jobs=[
        (data, tool_dir, TOOL_SYSTEM, test_file, str(out / "run-tool")),
        (data, tool_dir, TOOL_SYSTEM, test_file, str(out / "headroom"), cfg.headroom_k,
         cfg.rl_temperature, cfg.headroom_problems)])
    first = _Start.measured(cfg, 1, tool_dir, out / "run-tool", greedy, sampled)
    starts, chosen = _more_starts(cfg, prepared, out, stage, pool, first)
    models["tool"] = chosen.model_dir
    transitions: dict[str, list[StageMove]] = {}
    results = {"text-only": text_metrics, "tool": chosen.greedy}
    if cfg.rl_steps:
        stage(f"GRPO from the tool model, tool output masked and NOT masked, side by side "
              f"({cfg.rl_steps} steps of {cfg.rl_prompts} x {cfg.rl_group_size} episodes), "
              f"each then evaluated on {n_test} held-out problems")
        train_file, names = str(prepared.train_file), ("tool + grpo", "tool + grpo (unmasked)")
        done = run_parallel(grpo_job, pool=pool, jobs=[
            (data, chosen.model_dir, train_file, masked, str(out / f"rl-grpo{suffix}"),
             (TOOL_SYSTEM, test_file, str(out / f"run-{_slug(name)}")))
            for name, masked, suffix in zip(names, (True, False), ("", "-unmasked"),
                                            strict=True)])
        for name, (model_dir, moves, metrics) in zip(names, done, strict=True):
            models[name], transitions[name], results[name] = model_dir, moves, metrics
    runs = {name: {"metrics": results[name], "model_dir": models[name],
                   "run_dir": chosen.run_dir if name == "tool" else out / f"run-{_slug(name)}"}
            for name in models}
    attempts = [StartAttempt(s.attempt, start_seed(cfg.seed, s.attempt), s.headroom,
                             s is chosen) for s in starts]
    return _finish(cfg, out, save_model_to, stage, runs, transitions, attempts,
                   prepared.conversion, started)


@dataclass(frozen=True, slots=True)
class _Start:
    """A start grown for the tool model: its attempt, model, greedy run and headroom."""

    attempt: int
    model_dir: str
    run_dir: Path
    greedy: RunMetrics
    headroom: Headroom

    @classmethod
    def measured(cls, cfg: DemoConfig, attempt: int, model_dir: str, run_dir: Path,
                 greedy: RunMetrics, sampled: RunMetrics) -> _Start:
        """The start whose greedy run and pass@k run are ``greedy`` and ``sampled``."""
        return cls(attempt, model_dir, run_dir, greedy,
                   Headroom.measure(cfg.headroom_k, cfg.rl_temperature, greedy, sampled))

    def passes(self, cfg: DemoConfig) -> bool:
        return self.headroom.pass_at_k >= cfg.min_start_pass_at_k


def _more_starts(cfg: DemoConfig, prepared: DemoData, out: Path, stage: Stage,
                 pool: ProcessPoolExecutor | None,
                 first: _Start) -> tuple[list[_Start], _Start]:
    """The starts grown, and the one GRPO starts from: ``first`` when it passes
    ``cfg.min_start_pass_at_k``; otherwise the remaining attempts are grown side by side from
    their own seeds (each then evaluated, in ``out/start-N``) and the first that passes is
    used (the last when none does)."""
    k = cfg.headroom_k
    stage(f"headroom: greedy pass@1 {first.headroom.greedy_pass_at_1:.1%}, pass@{k} "
          f"{first.headroom.pass_at_k:.1%} at temperature {cfg.rl_temperature}")
    if first.passes(cfg) or cfg.start_attempts == 1:
        return [first], first
    attempts = range(2, cfg.start_attempts + 1)
    stage(f"the start's pass@{k} is below {cfg.min_start_pass_at_k:.0%}: it has not learned to "
          f"copy the problems' numbers into code; growing the tool model again from other "
          f"seeds (attempts {attempts[0]}-{attempts[-1]} of {cfg.start_attempts}, side by "
          "side)")
    data, test_file = cfg.model_dump(), str(prepared.test_file)
    grown = run_parallel(start_job, pool=pool, jobs=[
        (data, prepared.mixed, str(prepared.tokenizer_dir), str(out / f"start-{a}"),
         test_file, a) for a in attempts])
    starts = [first]
    for attempt, (model_dir, run_dir, greedy, sampled) in zip(attempts, grown, strict=True):
        start = _Start.measured(cfg, attempt, model_dir, Path(run_dir), greedy, sampled)
        starts.append(start)
        stage(f"start {attempt}: greedy pass@1 {start.headroom.greedy_pass_at_1:.1%}, "
              f"pass@{k} {start.headroom.pass_at_k:.1%}")
    chosen = next((s for s in starts if s.passes(cfg)), None)
    if chosen is None:
        stage(f"no start reached pass@{k} {cfg.min_start_pass_at_k:.0%} in "
              f"{cfg.start_attempts} attempts; GRPO runs from the last one and will find "
              "little to learn (more --start-attempts, or another --seed, may give a start)")
    return starts, chosen or starts[-1]


def _finish(cfg: DemoConfig, out: Path, save_model_to: Path | None, stage: Stage,
            runs: dict[str, dict[str, Any]], transitions: dict[str, list[StageMove]],
            starts: list[StartAttempt], conversion: Conversion,
            started: float) -> DemoSummary:
    """Write the report, save the better tool model for ``solve``, write the summary."""
    stage("writing the report")
    from agentmath.report import write_report  # noqa: PLC0415 - heavy (matplotlib)

    rl_dirs = [p for p in (out / "rl-grpo", out / "rl-grpo-unmasked") if p.exists()]
    report_paths = write_report([r["run_dir"] for r in runs.values()] + rl_dirs,
                                out / "report")
    rows = [ModelRow.of(name, r["metrics"], transitions.get(name)) for name, r in runs.items()]
    accuracy = {row.model: row.accuracy for row in rows}
    best = "tool + grpo" if "tool + grpo" in runs and (
        accuracy["tool + grpo"] >= accuracy["tool"]) else "tool"
    if save_model_to is not None:
        if save_model_to.exists():
            shutil.rmtree(save_model_to)
        shutil.copytree(runs[best]["model_dir"], save_model_to)
    summary = DemoSummary(
        models=rows, headroom=next(a.headroom for a in starts if a.used),
        conversion=conversion, config=cfg.model_dump(),
        report=ReportFiles(rows=report_paths.rows, **report_paths.files()),
        tool_model=str(save_model_to) if save_model_to else runs[best]["model_dir"],
        tool_model_is=best, seconds=round(time.monotonic() - started, 1), starts=starts)
    summary.write(out)
    return summary


def _slug(name: str) -> str:
    """A directory name for a model name: "tool + grpo (unmasked)" -> "tool-grpo-unmasked"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
