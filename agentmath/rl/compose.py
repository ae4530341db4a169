"""The composition root of an RL run: every live object of a run is built here, in one place.

:func:`open_run` builds, in this order (the order decides the RNG draws, so a run and its
resume see the same ones): the accelerator; the learner (the training problems first, so a
bad data file fails before any model is loaded; the model, a reference copy for KL, the
optimizer and LR schedule, restored from the newest checkpoint when resuming); the stage
controller and the request stream (at the checkpoint's stage and data cursor); the metrics
sink; the generators (the backend the episodes sample from and the weight sync that feeds
it); and the rollouts: in this process the rollout engine over the backend, a sandbox pool or
the sandbox services, and the tool format, or on a Ray cluster the rollout workers
(``RLConfig.ray``), with the checkpoint's pending groups put back (:func:`put_back`). Each is
typed by its contract (:mod:`agentmath.rollout.contract`), and everything is closed when the
block ends.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath._lazy import require
from agentmath.backends.base import Backend, Reconnecting
from agentmath.rl.config import RLConfig
from agentmath.rl.records import CheckpointState
from agentmath.rl.rewards import RewardModel
from agentmath.rl.rollouts import RequestStream, Sampling
from agentmath.rl.run import (
    Generators,
    Learner,
    RLRun,
    bound_settings,
    stage_budgets,
    stages_of,
)
from agentmath.rl.schedules import StageController, lr_factor
from agentmath.rl.sharded import ShardedLearner
from agentmath.rl.sync import WeightSync
from agentmath.rl.update import PolicyUpdater
from agentmath.rollout.contract import EngineControl, Iterations, Restorable
from agentmath.rollout.records import PendingGroup, RolloutStats
from agentmath.runs.files import STEP_METRICS_FILE
from agentmath.tracking import open_sink
from agentmath.train import sharding
from agentmath.train.plumbing import (
    build_optimizer,
    list_checkpoints,
    load_for_training,
    read_checkpoint,
    restore_checkpoint,
    restore_state,
    restore_weights,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from agentmath.config import LoopConfig, RolloutConfig
    from agentmath.distributed.worker import WorkerSpec
    from agentmath.rl.sync_vllm import VLLMWeightSync
    from agentmath.tasks import Task


def served_name(cfg: RLConfig) -> str:
    """The model name the generator's servers serve (the model directory's name by default)."""
    return cfg.served_model_name()


def worker_spec(cfg: RLConfig, loop: LoopConfig,
                restore: Callable[[int, str | None], Awaitable[None]] | None = None,
                ) -> WorkerSpec:
    """What each Ray rollout worker needs to sample this run's episodes from its servers;
    ``restore`` loads a version's weights into a server that was lost (None: every one)."""
    from agentmath.backends.registry import BackendSettings
    from agentmath.distributed.worker import WorkerSpec

    g = cfg.generator
    urls = g.base_urls[0] if len(g.base_urls) == 1 else list(g.base_urls)
    settings = BackendSettings(served_name(cfg), urls, timeout_s=g.http_timeout_s,
                               max_outage_s=g.max_outage_s, router=g.router)
    return WorkerSpec(backend="openai", settings=settings, format=cfg.format, loop=loop,
                      sandbox=cfg.sandbox, sandbox_url=cfg.sandbox_url,
                      sandbox_token_file=cfg.sandbox_token_file, restore_weights=restore)


def learner_accelerator(config: RLConfig) -> Any:
    """The accelerator of the learner (device, precision; under sharding the process group
    joined first)."""
    accelerate = require("accelerate", "train")
    torch = require("torch", "train")
    cpu = config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available())
    precision = "bf16" if config.optim.bf16 else "no"
    sharding.check_launch(config.optim.sharding, "rl")
    if config.optim.sharding == "fsdp":
        sharding.init_process_group(cpu)
    _drop_other_state(accelerate, cpu, precision)
    return accelerate.Accelerator(cpu=cpu, mixed_precision=precision)


def _drop_other_state(accelerate: Any, cpu: bool, precision: str) -> None:
    """accelerate keeps one state per process and refuses (ValueError) an Accelerator of
    another precision or device: a second run in one process (a sweep, a notebook, a test
    session) with other settings would fail at its start. A single-process state that differs
    is dropped; nothing else holds it. A distributed one is kept: its process group belongs to
    the launcher. (accelerate's own ``_reset_state``: the library has no public way.)"""
    state = accelerate.state.AcceleratorState._shared_state
    if not state or state.get("num_processes", 1) > 1:
        return
    device = state.get("device")
    on_cpu = device is not None and device.type == "cpu"
    if state.get("_mixed_precision") != precision or on_cpu != cpu:
        accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)


def _tasks(cfg: RLConfig) -> list[Task]:
    from agentmath.tasks import load_tasks

    d = cfg.data
    return load_tasks(d.dataset, data_dir=d.data_dir, limit=d.limit,
                      problem_field=d.problem_field, answer_field=d.answer_field,
                      id_field=d.id_field, allow_hub=False)


def build_learner(cfg: RLConfig, accelerator: Any, out_dir: Path, resume: bool
                  ) -> tuple[Learner, CheckpointState | None, int | None]:
    """Model (LoRA optional), reference copy for KL, optimizer + schedule, restored from the
    newest checkpoint when ``resume`` finds one; with the checkpoint's state and step."""
    model, tokenizer = load_for_training(
        cfg.model, None, seed=cfg.seed, lora=cfg.optim.lora, lora_r=cfg.optim.lora_r,
        lora_alpha=cfg.optim.lora_alpha, lora_dropout=cfg.optim.lora_dropout, what="rl")
    if cfg.optim.sharding == "fsdp":
        return _sharded_learner(cfg, accelerator, model, tokenizer, out_dir, resume)
    device = accelerator.device
    model = model.to(device)
    ref = None
    if cfg.loss.kl_coef > 0:
        ref = copy.deepcopy(model).eval().requires_grad_(False)
    optimizer, scheduler = _optimizer(cfg, model)
    found = list_checkpoints(out_dir) if resume else []
    state, resumed_from = None, None
    if found:
        resumed_from, path = found[-1]
        state = CheckpointState.from_payload(restore_checkpoint(
            path, model, optimizer, scheduler, lora=cfg.optim.lora, device=device,
            structural=asdict(bound_settings(cfg))))
    model, optimizer = accelerator.prepare(model, optimizer)
    # Under mixed precision accelerate wraps model.forward in autocast; the updater enters
    # autocast itself around each of its forwards, and the in-process generator, which shares
    # the model, must not decode under it (bf16 autocast makes the demo's decode steps several
    # times slower than fp32, its attention calls dominating; docs/gpu.md).
    accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    updater = PolicyUpdater(cfg, model, optimizer, scheduler, accelerator, pad, ref)
    return Learner(accelerator, model, tokenizer, updater), state, resumed_from


def _optimizer(cfg: RLConfig, model: Any) -> tuple[Any, Any]:
    o = cfg.optim
    total = cfg.steps * cfg.loss.mini_batches
    return build_optimizer(
        model, o.learning_rate, o.weight_decay,
        lambda done: lr_factor(done, o.warmup_steps, total, o.decay, o.min_lr_factor))


def _sharded_learner(cfg: RLConfig, accelerator: Any, model: Any, tokenizer: Any,
                     out_dir: Path, resume: bool
                     ) -> tuple[Learner, CheckpointState | None, int | None]:
    """build_learner under FSDP: the checkpoint's weights loaded before sharding, the model
    (and the KL reference) sharded, the optimizer built on the shards, its state after."""
    o, device = cfg.optim, accelerator.device
    ref = copy.deepcopy(model).eval().requires_grad_(False) if cfg.loss.kl_coef > 0 else None
    found = list_checkpoints(out_dir) if resume else []
    payload = (read_checkpoint(found[-1][1], asdict(bound_settings(cfg)), mmap=True)
               if found else None)
    if found:
        restore_weights(found[-1][1], model, lora=o.lora)
    model = sharding.shard_model(model, o.fsdp, bf16=o.bf16, device=device)
    if ref is not None:
        ref = sharding.shard_model(ref, o.fsdp, bf16=o.bf16, device=device)
    optimizer, scheduler = _optimizer(cfg, model)
    if payload is not None:
        restore_state(found[-1][1], payload, optimizer, scheduler, load_by_name=lambda sd:
                      sharding.load_optimizer_state(model, optimizer, sd))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    updater = PolicyUpdater(cfg, model, optimizer, scheduler, accelerator, pad, ref)
    learner = Learner(accelerator, model, tokenizer, updater,
                      ShardedLearner(model, updater, o.lora))
    state = CheckpointState.from_payload(payload) if payload is not None else None
    return learner, state, found[-1][0] if found else None


def build_generators(cfg: RLConfig, learner: Learner, out_dir: Path) -> Generators:
    """The backend the engine samples from and the weight sync that feeds it."""
    if cfg.generator.backend == "hf":
        from agentmath.backends.hf import HFBackend
        from agentmath.rl.sync import InProcessSync

        # on the learner's device: the backend would otherwise pick cuda whenever there is
        # one, moving the shared model away from a run told to train on the CPU. A sharded
        # learner has no whole model to share: rank 0 decodes with a gathered copy (LoRA
        # merged), which each push refreshes.
        model = learner.unwrapped
        if learner.sharded is not None:
            model = learner.saved()[0]
            model = model.merge_and_unload() if cfg.optim.lora else model
        backend = HFBackend(model, learner.tokenizer,
                            device=str(learner.accelerator.device),
                            max_batch=cfg.generator.max_batch,
                            continuous=cfg.generator.continuous,
                            prefix_cache_rows=cfg.generator.prefix_cache_rows)
        return Generators(backend, InProcessSync(backend.model))
    from agentmath.backends import make_backend
    from agentmath.rl.sync_vllm import VLLMWeightSync

    g = cfg.generator
    name = served_name(cfg)
    remote = None
    if cfg.ray is None:  # on Ray, every worker has its own client of the servers
        remote = make_backend("openai", name, base_url=g.base_urls, timeout_s=g.http_timeout_s,
                              max_outage_s=g.max_outage_s, router=g.router)
    sync = VLLMWeightSync(g.base_urls, g.sync_dir or out_dir / "weights", lora=cfg.optim.lora,
                          served_name=name, max_outage_s=g.max_outage_s)
    _restore_after_outages(remote, sync)
    return Generators(remote, sync)


def _restore_after_outages(remote: Backend | None, sync: VLLMWeightSync) -> None:
    """A server that was lost (maybe restarted, with its start weights) gets the current
    weights back before its next request: the client's reconnect hook, for one server or
    for each server behind a router, after an outage of all or one server's failover. On
    Ray, where ``remote`` is None, each worker's client does the same with
    ``sync.restorer()`` (:func:`open_rollouts` gives it to the workers)."""
    if isinstance(remote, Reconnecting):
        remote.on_reconnect(sync.restore)


@contextlib.asynccontextmanager
async def open_rollouts(cfg: RLConfig, backend: Backend | None, stream: RequestStream,
                        sampling: Sampling,
                        loop: LoopConfig, rollout: RolloutConfig,
                        version: int, sync: WeightSync | None = None,
                        ) -> AsyncIterator[tuple[EngineControl, Iterations]]:
    """``(engine, iterations)``: the engine the trainer steers between steps (policy version,
    model name, stage budgets) and the iterations it collects groups from; ``sync``: the
    weight sync whose restore Ray workers run after an outage of their servers."""
    if cfg.ray is None:
        from agentmath.formats import get_format
        from agentmath.rollout.partial import PartialRollout
        from agentmath.rollout.scheduler import RolloutEngine
        from agentmath.sandbox.factory import open_sandbox

        async with open_sandbox(cfg.sandbox, cfg.sandbox_url, cfg.sandbox_token_file) as pool:
            engine = RolloutEngine(backend, pool, get_format(cfg.format), loop=loop,
                                   config=rollout, sampling=sampling)
            engine.set_policy_version(version)
            iterations = PartialRollout(engine, stream)
            try:
                yield engine, iterations
            finally:
                await iterations.aclose()
        return
    from agentmath.distributed.engine import RayRolloutEngine
    from agentmath.distributed.iterations import RayIterations
    from agentmath.rl.sync_vllm import VLLMWeightSync

    restore = sync.restorer() if isinstance(sync, VLLMWeightSync) else None
    ray_engine = RayRolloutEngine(worker_spec(cfg, loop, restore), cfg.ray, sampling,
                                  max_in_flight=rollout.max_in_flight)
    try:
        await ray_engine.start()
        ray_engine.set_budgets(loop, rollout)
        ray_engine.set_policy_version(version)
        yield ray_engine, RayIterations(ray_engine, stream)
    finally:
        await ray_engine.close()


def put_back(pending: list[PendingGroup], stream: RequestStream,
             iterations: Iterations) -> RolloutStats:
    """A checkpoint's pending groups, back where a resumed run takes them first (the resume
    rule of docs/rl.md): restored as they were where the iterations can (their finished
    samples kept, their parked episodes continued), else their problems drawn again first at
    their own positions, every episode run from scratch. What became of their episodes."""
    counts = RolloutStats()
    for group in pending:
        request = stream.redraw(group)
        if request is None:
            log.warning("checkpoint: pending problem %r is no longer in the data: skipped",
                        group.task_id)
            continue
        if isinstance(iterations, Restorable) and group.saved:
            counts.add(iterations.restore(request, group))
        else:
            stream.requeue(request)
            counts.resumed_regenerated += len(request.sample_indices)
    return counts


@contextlib.asynccontextmanager
async def open_run(config: RLConfig, out_dir: Path, *, resume: bool) -> AsyncIterator[RLRun]:
    """Every live object of a run, built in the module docstring's order, as one
    :class:`~agentmath.rl.run.RLRun` (closed when the block ends)."""
    accelerator = learner_accelerator(config)
    tasks = _tasks(config)  # a bad data file fails before any model is loaded
    learner, state, resumed_from = build_learner(config, accelerator, out_dir, resume)
    controller = StageController(stages_of(config),
                                 threshold=config.stages.truncation_threshold,
                                 window=config.stages.window)
    if state is not None:
        controller.restore(state.stage)
    stream = RequestStream(tasks, config.group_size, seed=config.seed,
                           shuffle=config.data.shuffle, cursor=state.cursor if state else 0,
                           oversample=config.filters.oversample)
    step = state.step if state else 0
    sink = open_sink(out_dir, STEP_METRICS_FILE, config.tracker_names(), resume_step=step,
                     wandb=config.wandb, config=config.model_dump(mode="json"))
    try:
        generators = build_generators(config, learner, out_dir)
        try:
            loop_cfg, rollout_cfg = stage_budgets(config, controller.stage)
            sampling = Sampling(stream, top_p=config.temperature.top_p)
            rewards = RewardModel(config.rewards)
            version = state.version if state else 0
            async with open_rollouts(config, generators.backend, stream, sampling, loop_cfg,
                                     rollout_cfg, version, generators.sync
                                     ) as (engine, iterations):
                carried = put_back(state.pending if state else [], stream, iterations)
                yield RLRun(config, out_dir, learner, generators, engine, iterations, stream,
                            sampling, rewards, controller, sink, step=step,
                            version=version, events=list(state.events) if state else [],
                            resumed_from=resumed_from, carried=carried)
        finally:
            await generators.sync.aclose()
            if generators.backend is not None:  # none on Ray: each worker closes its own
                await generators.backend.aclose()
    finally:
        sink.close()
