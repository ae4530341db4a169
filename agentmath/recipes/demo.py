"""The demo recipe: grow tiny models on the CPU; show that tool use beats text alone, that agentic
GRPO measurably improves the tool model, and test DeepMath's choice of training on tool output.

Read top to bottom; each stage is a call into the library:

1. generate seeded multi-step word problems with big numbers, split train / validation / test
   (:mod:`agentmath.recipes.demo_data`): every choice below is measured on the validation
   problems; the test problems are read by the final evaluation only;
2. code injection: turn each training chain-of-thought into a tool trajectory, executing every
   snippet in the sandbox and keeping only verified ones;
3. build a tokenizer on the training text and two identical tiny Qwen3 models;
4. SFT one on the text chain-of-thought; SFT the other on a **mixture**: ``text_share`` of its
   trajectories do the arithmetic in text, the rest run it as code (tool output masked from the
   loss). The mixed model chooses between text and code with real probability at every step of
   a solution, and only the code path gets 3-4 digit products right: a decision under
   uncertainty that the accuracy reward resolves (RL teaches *when* to use the tool);
5. measure the start's headroom on the validation problems: greedy pass@1, and pass@k at the
   RL temperature (RL sharpens what sampling can already sometimes do). A tiny model learns
   to copy the problem's numbers into code at an SFT step that varies widely with its
   initialisation and data order, now and then not within the budget: a start whose pass@k is
   below ``min_start_pass_at_k`` is grown again from other seeds (the remaining
   ``start_attempts`` side by side), and GRPO starts from the first that passes;
6. agentic GRPO from the mixed model on the training problems (accuracy reward, void-turn
   filtering, two budget stages: a tight tool-call budget first, grown automatically when the
   truncation rate passes the threshold), twice: tool output masked from the loss, and NOT
   masked (the ablation); the masked run's greedy accuracy on the validation problems against
   its start's chooses the tool model saved for ``solve``;
7. the final evaluation, once every choice is made: all four models on the test problems
   through the real agent loop, sandbox and evaluation harness, greedy (with 95% CIs) and
   sampled at the RL temperature; write the report (comparison, plots, training curves with
   the stage transitions, HTML viewer) and save the chosen tool model for ``solve``.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentmath.recipes._parallel import run_parallel, submit, worker_pool
from agentmath.recipes.demo_config import (  # noqa: F401 - the recipe's public names
    FORMAT,
    TEXT_SYSTEM,
    TOOL_SYSTEM,
    DemoConfig,
)
from agentmath.recipes.demo_data import DemoData, prepare_data
from agentmath.recipes.demo_jobs import (  # noqa: F401 - the recipe's public names
    MAX_TOOL_CALLS,
    EvalJob,
    EvalRun,
    GRPOJob,
    GRPOResult,
    SFTJob,
    StartJob,
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
    Sampling,
    StartAttempt,
)

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor
    from contextlib import AbstractContextManager

    from agentmath.eval.results import RunMetrics
    from agentmath.rl.records import StageMove


Stage = Callable[[str], None]
TEXT, TOOL, GRPO, UNMASKED = "text-only", "tool", "tool + grpo", "tool + grpo (unmasked)"


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
    stage's jobs run side by side in one pool of two workers kept for the whole demo:
    ``pool`` (a :func:`demo_pool` kept for several demos, whose jobs each seed their own
    RNGs), or one started for this demo."""
    check_device(cfg)
    if pool is not None:
        return _run_stages(cfg, out, save_model_to, stage, pool)
    with demo_pool() as own:
        return _run_stages(cfg, out, save_model_to, stage, own)


@dataclass(frozen=True, slots=True)
class _Model:
    """A model of the final table: its name, dir and system prompt, its budget-stage
    transitions (GRPO rows) and its greedy validation accuracy (the candidates for solve's
    model)."""

    name: str
    model_dir: str
    system: str
    transitions: list[StageMove] | None = None
    validation_accuracy: float | None = None


def _run_stages(cfg: DemoConfig, out: Path, save_model_to: Path | None, stage: Stage,
                pool: ProcessPoolExecutor | None) -> DemoSummary:
    started = time.monotonic()
    data = prepare_data(cfg, out, stage)
    stage(f"SFT of the text-only and the tool model side by side ({cfg.steps} steps each; the "
          f"tool model's data: {1 - cfg.text_share:.0%} code, {cfg.text_share:.0%} text)")
    text_dir, tool_dir = run_parallel(sft_job, pool=pool, jobs=[
        (SFTJob(cfg, data.text_examples, str(data.tokenizer_dir), str(out / "model-text-only"),
                TEXT_SYSTEM),),
        (SFTJob(cfg, data.mixed, str(data.tokenizer_dir), str(out / "model-tool"),
                TOOL_SYSTEM),)])
    stage(f"the tool model's headroom on the {data.n_validation} validation problems: greedy, "
          f"and pass@{cfg.headroom_k} at temperature {cfg.rl_temperature}")
    greedy, sampled = (metrics for (metrics,) in run_parallel(eval_job, pool=pool, jobs=[
        (EvalJob(cfg, tool_dir, TOOL_SYSTEM, (run,)),)
        for run in headroom_runs(cfg, data, out / "validation")]))
    first = _Start.measured(cfg, 1, tool_dir, greedy, sampled)
    starts, chosen = _more_starts(cfg, data, out, stage, pool, first)
    tool = _Model(TOOL, chosen.model_dir, TOOL_SYSTEM,
                  validation_accuracy=chosen.headroom.greedy_pass_at_1)
    finals: dict[str, Future[tuple[RunMetrics, ...]]] = {}
    if not cfg.rl_steps:
        models, best = [_Model(TEXT, text_dir, TEXT_SYSTEM), tool], _choose(stage, tool)
        _final_stage(cfg, data, out, pool, models, finals, stage)
    else:
        models, best = _grpo_stage(cfg, data, out, stage, pool, text_dir, tool, finals)
    results = {name: future.result() for name, future in finals.items()}
    rows = [ModelRow.of(m.name, *results[m.name], transitions=m.transitions,
                        validation_accuracy=m.validation_accuracy) for m in models]
    attempts = [StartAttempt(s.attempt, start_seed(cfg.seed, s.attempt), s.headroom,
                             s is chosen) for s in starts]
    return _finish(cfg, out, save_model_to, stage, rows, best, attempts, data, started)


def headroom_runs(cfg: DemoConfig, data: DemoData, root: Path) -> tuple[EvalRun, EvalRun]:
    """A start's headroom runs on the validation problems, in ``root``: greedy, and
    ``headroom_k`` samples each at the RL temperature."""
    validation = str(data.validation_file)
    return (EvalRun(validation, str(root / "tool-greedy")),
            EvalRun(validation, str(root / "tool-sampled"), cfg.headroom_k,
                    cfg.rl_temperature))


def final_runs(cfg: DemoConfig, data: DemoData, out: Path, name: str) -> tuple[EvalRun, ...]:
    """A model's runs in the final table, on the test problems: greedy on all of them (in
    ``out/run-NAME``, the report's), and ``sampled_samples`` each at the RL temperature on the
    first ``sampled_problems`` (in ``out/sampled-NAME``)."""
    test = str(data.test_file)
    return (EvalRun(test, str(out / f"run-{_slug(name)}")),
            EvalRun(test, str(out / f"sampled-{_slug(name)}"), cfg.sampled_samples,
                    cfg.rl_temperature, cfg.sampled_on()))


def _grpo_stage(cfg: DemoConfig, data: DemoData, out: Path, stage: Stage,
                pool: ProcessPoolExecutor | None, text_dir: str, tool: _Model,
                finals: dict[str, Future[tuple[RunMetrics, ...]]]
                ) -> tuple[list[_Model], _Model]:
    """The two GRPO runs side by side; the masked one is then evaluated on the validation
    problems to choose solve's model, and the final stage starts as soon as that choice is
    made (the unmasked run's final evaluation when it ends). Returns the four models and the
    chosen one."""
    stage(f"GRPO from the tool model, tool output masked and NOT masked, side by side "
          f"({cfg.rl_steps} steps of {cfg.rl_prompts} x {cfg.rl_group_size} episodes)")
    jobs = {name: submit(pool, grpo_job, GRPOJob(
        cfg, tool.model_dir, str(data.train_file), masked, str(out / f"rl-grpo{suffix}"),
        evaluate=(EvalRun(str(data.validation_file), str(out / "validation" / "tool-grpo")),)
        if masked else ()))
        for name, masked, suffix in ((GRPO, True, ""), (UNMASKED, False, "-unmasked"))}
    done: GRPOResult = jobs[GRPO].result()
    grpo = _Model(GRPO, done.model_dir, TOOL_SYSTEM, done.transitions,
                  validation_accuracy=_accuracy(done.evaluated[0]))
    best = _choose(stage, tool, grpo)
    text = _Model(TEXT, text_dir, TEXT_SYSTEM)
    _final_stage(cfg, data, out, pool, [grpo, tool, text], finals, stage)
    late: GRPOResult = jobs[UNMASKED].result()
    unmasked = _Model(UNMASKED, late.model_dir, TOOL_SYSTEM, late.transitions)
    _final_stage(cfg, data, out, pool, [unmasked], finals)
    return [text, tool, grpo, unmasked], best


def _choose(stage: Stage, tool: _Model, grpo: _Model | None = None) -> _Model:
    """The tool model saved for ``solve``: GRPO's when its greedy accuracy on the validation
    problems is at least its start's, else the start."""
    if grpo is None:
        return tool
    best = grpo if (grpo.validation_accuracy or 0.0) >= (tool.validation_accuracy or 0.0) \
        else tool
    stage(f"the tool model for `solve`: {best.name} (greedy on the validation problems: "
          f"{tool.name} {tool.validation_accuracy or 0.0:.1%}, "
          f"{grpo.name} {grpo.validation_accuracy or 0.0:.1%})")
    return best


def _final_stage(cfg: DemoConfig, data: DemoData, out: Path, pool: ProcessPoolExecutor | None,
                 models: list[_Model], finals: dict[str, Future[tuple[RunMetrics, ...]]],
                 stage: Stage | None = None) -> None:
    """Queue the final evaluations of ``models`` on the test problems (into ``finals``);
    called only once every choice is made."""
    if stage is not None:
        stage(f"final evaluation on the {data.n_test} test problems: greedy, and "
              f"{cfg.sampled_samples} samples at temperature {cfg.rl_temperature} on "
              f"{cfg.sampled_on()} of them")
    for m in models:
        finals[m.name] = submit(pool, eval_job, EvalJob(cfg, m.model_dir, m.system,
                                                        final_runs(cfg, data, out, m.name)))


@dataclass(frozen=True, slots=True)
class _Start:
    """A start grown for the tool model: its attempt, model and headroom (validation)."""

    attempt: int
    model_dir: str
    headroom: Headroom

    @classmethod
    def measured(cls, cfg: DemoConfig, attempt: int, model_dir: str, greedy: RunMetrics,
                 sampled: RunMetrics) -> _Start:
        """The start whose greedy run and pass@k run are ``greedy`` and ``sampled``."""
        return cls(attempt, model_dir,
                   Headroom.measure(cfg.headroom_k, cfg.rl_temperature, greedy, sampled))

    def passes(self, cfg: DemoConfig) -> bool:
        return self.headroom.pass_at_k >= cfg.min_start_pass_at_k


def _more_starts(cfg: DemoConfig, data: DemoData, out: Path, stage: Stage,
                 pool: ProcessPoolExecutor | None,
                 first: _Start) -> tuple[list[_Start], _Start]:
    """The starts grown, and the one GRPO starts from: ``first`` when it passes
    ``cfg.min_start_pass_at_k``; otherwise the remaining attempts are grown side by side from
    their own seeds (each then measured on the validation problems, in ``out/start-N``) and
    the first that passes is used (the last when none does)."""
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
    grown = run_parallel(start_job, pool=pool, jobs=[(StartJob(
        SFTJob(cfg, data.mixed, str(data.tokenizer_dir), str(out / f"start-{a}" / "model-tool"),
               TOOL_SYSTEM, seed=start_seed(cfg.seed, a)),
        headroom_runs(cfg, data, out / f"start-{a}" / "validation")),) for a in attempts])
    starts = [first]
    for attempt, result in zip(attempts, grown, strict=True):
        start = _Start.measured(cfg, attempt, result.model_dir, *result.headroom)
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
            rows: list[ModelRow], best: _Model, starts: list[StartAttempt], data: DemoData,
            started: float) -> DemoSummary:
    """Write the report, save the chosen tool model for ``solve``, write the summary."""
    stage("writing the report")
    from agentmath.report import write_report  # noqa: PLC0415 - heavy (matplotlib)

    rl_dirs = [p for p in (out / "rl-grpo", out / "rl-grpo-unmasked") if p.exists()]
    report_paths = write_report([out / f"run-{_slug(row.model)}" for row in rows] + rl_dirs,
                                out / "report")
    if save_model_to is not None:
        if save_model_to.exists():
            shutil.rmtree(save_model_to)
        shutil.copytree(best.model_dir, save_model_to)
    summary = DemoSummary(
        models=rows, headroom=next(a.headroom for a in starts if a.used),
        conversion=data.conversion, config=cfg.model_dump(),
        report=ReportFiles(rows=report_paths.rows, **report_paths.files()),
        tool_model=str(save_model_to) if save_model_to else best.model_dir,
        tool_model_is=best.name, seconds=round(time.monotonic() - started, 1), starts=starts,
        sampling=Sampling(cfg.sampled_samples, cfg.rl_temperature, cfg.sampled_on()))
    summary.write(out)
    return summary


def _accuracy(metrics: RunMetrics) -> float:
    """The mean accuracy of a run (0 for a run without samples)."""
    return metrics.avg.value if metrics.avg is not None else 0.0


def _slug(name: str) -> str:
    """A directory name for a model name: "tool + grpo (unmasked)" -> "tool-grpo-unmasked"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
