"""Chat templates that rewrite history, through the native chat driver and a real template.

The server (:mod:`tests.fixtures.template_server`) renders each turn's conversation with a real
tokenizer's chat template and reports the prompt ids it rendered and the ids it sampled, as
vLLM does with ``return_token_ids``. With a template that drops every earlier turn's reasoning
the episode is flagged and trained as one sequence per turn, each exactly what the sampler saw;
``refuse`` keeps it out of the loss (its reward still in its group's baseline); a template that
extends (ChatML, the tiny test model's) is one sequence and not flagged. Against a real vLLM
server every training sequence is the server's own prompt ids then its sampled ids (there the
tiny model's episodes are rewritten: vLLM's hermes parser leaves a line break in ``content``
that the template doubles).
"""

from __future__ import annotations

import pytest

from agentmath.agent.loop import run_chat_episode
from agentmath.agent.trajectory import Trajectory
from agentmath.backends.openai import OpenAIBackend
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.models.tiny import CHAT_TEMPLATE
from agentmath.rl.batch import ScoredGroup, ScoredSample, TrainSample, to_train_samples
from agentmath.sandbox import SandboxPool
from tests.fixtures.qwen3_like import (
    DROP_ALL_THINKING_TEMPLATE,
    QWEN3_LIKE_TEMPLATE,
    qwen3_like_dir,
)
from tests.fixtures.template_server import TemplateServer, template_server

pytestmark = pytest.mark.integration
transformers = pytest.importorskip("transformers")


@pytest.fixture
async def pool():
    async with SandboxPool(SandboxConfig(spare_workers=1, max_sessions=2)) as p:
        yield p


def tokenizer(template: str):  # noqa: ANN201 - a Hugging Face tokenizer
    return transformers.AutoTokenizer.from_pretrained(str(qwen3_like_dir("qwen3", template)))


async def episode(server: TemplateServer, pool: SandboxPool, **loop: object) -> Trajectory:
    backend = OpenAIBackend(server.url, "scripted", timeout_s=30)
    try:
        traj = await run_chat_episode("What is 6 * 7?", backend, pool, LoopConfig(**loop))
    finally:
        await backend.aclose()
    assert (traj.finish_reason, traj.answer) == ("answered", "42"), traj.error
    assert traj.token_exact
    return traj


def samples_of(traj: Trajectory) -> list[TrainSample]:
    return to_train_samples(ScoredSample("g", 0, traj, 1.0, {}, True, advantage=1.0))


def assert_sampler_exact(samples: list[TrainSample],
                         turns: list[tuple[list[int], list[int]]]) -> None:
    """Each turn the server served is in exactly one sample as its prompt ids then its
    sampled ids, loss on the sampled ids; the loss tokens are the sampled ids, once each."""
    for prompt, sampled in turns:
        end = len(prompt) + len(sampled)
        homes = [s for s in samples if s.ids[:end] == prompt + sampled
                 and s.mask[len(prompt):end] == [1] * len(sampled)]
        assert len(homes) == 1
    trained = [t for s in samples for t, m in zip(s.ids, s.mask, strict=True) if m]
    assert trained == [t for _, sampled in turns for t in sampled]


async def test_a_template_that_drops_earlier_thinking_splits_the_episode_per_turn(pool):
    with template_server(tokenizer(DROP_ALL_THINKING_TEMPLATE)) as server:
        traj = await episode(server, pool)
    turns = server.turns
    assert len(turns) == 3
    for k in (1, 2):  # each prompt rewrote the turn before (its reasoning dropped)
        prompt, sampled = turns[k - 1]
        later = turns[k][0]
        assert later[:len(prompt) + len(sampled)] != prompt + sampled
    assert traj.history_rewrite == "per_turn"
    samples = samples_of(traj)
    assert [s.ids for s in samples] == [p + s for p, s in turns]
    assert_sampler_exact(samples, turns)
    assert {s.advantage for s in samples} == {1.0}
    for sample, (prompt, sampled) in zip(samples, turns, strict=True):  # the sampler's own
        assert sample.sampler_logp[len(prompt):] == pytest.approx(
            [-0.1 * (i + 1) for i in range(len(sampled))])
    back = Trajectory.from_json(traj.to_json())
    assert [s.ids for s in samples_of(back)] == [s.ids for s in samples]


async def test_a_template_that_extends_is_one_sequence_and_not_flagged(pool):
    with template_server(tokenizer(CHAT_TEMPLATE), think=False) as server:
        traj = await episode(server, pool)
    turns = server.turns
    assert traj.history_rewrite is None and len(traj.sequences) == 1
    assert traj.token_ids == turns[-1][0] + turns[-1][1]
    samples = samples_of(traj)
    assert len(samples) == 1
    assert_sampler_exact(samples, turns)


async def test_qwen3s_template_extends_when_the_reasoning_goes_back(pool):
    """Qwen3's template keeps the reasoning of the turns after the last user query: the driver
    sends each turn's reasoning back, so a tool-calling episode's history is not rewritten."""
    with template_server(tokenizer(QWEN3_LIKE_TEMPLATE)) as server:
        traj = await episode(server, pool)
    assert all(m.get("reasoning") for m in traj.messages if m["role"] == "assistant")
    assert traj.history_rewrite is None and len(samples_of(traj)) == 1
    assert_sampler_exact(samples_of(traj), server.turns)


async def test_refuse_keeps_a_rewritten_episode_out_of_the_loss(pool):
    torch = pytest.importorskip("torch")
    accelerate = pytest.importorskip("accelerate")
    from agentmath.rl.config import RLConfig
    from agentmath.rl.update import PolicyUpdater
    from agentmath.rollout.records import Group, GroupRequest
    from agentmath.tasks import Task

    with template_server(tokenizer(DROP_ALL_THINKING_TEMPLATE)) as server:
        split = await episode(server, pool)
        refused = await episode(server, pool, history_rewrite="refuse")
    assert refused.history_rewrite == "refuse" and samples_of(refused) == []

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(qwen3_like_dir("qwen3", DROP_ALL_THINKING_TEMPLATE)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    updater = PolicyUpdater(RLConfig(model="unused", data={"dataset": "unused"}), model, optimizer,
                            torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0),
                            accelerate.Accelerator(cpu=True), pad_id=0)

    def group(*trajs: Trajectory) -> ScoredGroup:
        request = GroupRequest(Task("t", "What is 6 * 7?", "42"), samples=len(trajs))
        return ScoredGroup(Group(request), [
            ScoredSample("t", i, t, float(i % 2), {}, bool(i % 2)) for i, t in enumerate(trajs)])

    both = updater.update([group(split, split)])
    one = updater.update([group(split, refused)])
    # a loss normalised by tokens: the split episode's sampled ids, each once; none refused
    assert both.loss_tokens == 2 * split.model_tokens
    assert one.loss_tokens == split.model_tokens



class Recording:
    """A chat backend that keeps the ids of every reply (the prompt the server rendered and
    the ids it sampled): what the sampler saw, as the server says."""

    def __init__(self, backend: OpenAIBackend) -> None:
        self.backend = backend
        self.name = backend.name
        self.turns: list[tuple[list[int], list[int]]] = []

    async def chat(self, messages, **kwargs):  # noqa: ANN001, ANN201 - OpenAIBackend.chat's
        message = await self.backend.chat(messages, **kwargs)
        self.turns.append((message["prompt_token_ids"], message["token_ids"]))
        return message


@pytest.mark.vllm
@pytest.mark.slow
async def test_real_vllm_chat_episodes_train_on_what_the_sampler_saw(vllm_server, pool):
    """Against a real vLLM server (the tiny tool model, hermes tool calls), whether or not its
    template re-renders a turn as sampled, every training sequence of a multi-turn episode is
    the server's own prompt ids then its sampled ids, with the server's logprobs."""
    from agentmath.backends.base import SamplingParams
    from tests.fixtures.models import held_out_problems

    backend = OpenAIBackend(vllm_server, "tiny", timeout_s=60)
    runs = []
    try:
        for problem in held_out_problems(3):
            recording = Recording(backend)
            traj = await run_chat_episode(problem.problem, recording, pool,
                                          LoopConfig(max_model_tokens=300, max_tool_calls=4),
                                          SamplingParams(temperature=0.0))
            runs.append((traj, recording.turns))
    finally:
        await backend.aclose()
    assert any(len(turns) >= 2 for _, turns in runs)  # the conversation was re-rendered
    for traj, turns in runs:
        assert traj.finish_reason != "error", traj.error
        assert traj.token_exact
        samples = samples_of(traj)
        assert_sampler_exact(samples, turns)
        # the server's logprobs of what it sampled, on every loss token (the IS correction's)
        assert all(lp <= 0 for s in samples
                   for lp, m in zip(s.sampler_logp, s.mask, strict=True) if m)
        if traj.history_rewrite is None:
            assert [s.ids for s in samples] == [turns[-1][0] + turns[-1][1]]
