"""The ``agentmath`` verl agent loop against a fake server manager with verl's interface.

The model side is a scripted token policy (exact, deterministic turns) on the tiny test
model's real tokenizer; the sandbox is agentmath's real one; the output is verl's own
``AgentLoopOutput``. What is checked: the registry, token-exactness of every context sent,
the response mask (0 exactly on tool tokens), the tool output being the sandbox's real output,
logprobs aligned with their tokens, rewards from agentmath's reward model, verl's budgets.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    _agent_loop_registry,
)

from agentmath.tasks import Task
from agentmath.verl.agent_loop import AgentMathAgentLoop
from tests.verl.fakes import (
    FakeServerManager,
    ScriptedServer,
    dataset_fields,
    logprob_of,
    make_agent_loop,
    runs,
    sandbox_outputs,
    verl_config,
)

pytestmark = pytest.mark.usefixtures("close_sandboxes")

TARGET = "agentmath.verl.agent_loop.AgentMathAgentLoop"
TASK = Task("t1", "What is 123 * 457 + 1?", "56212")
CELLS = ["x = 123 * 457\nprint(x)", "print(x + 1)"]
TURNS = [f"Let me compute.\n<code>\n{CELLS[0]}\n</code>",
         f"That is 56211.\n<code>\n{CELLS[1]}\n</code>",
         "So the answer is \\boxed{56212}."]
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
            "logprobs": True}


def entry(**settings: Any) -> dict[str, Any]:
    return {"name": "agentmath", "_target_": TARGET, "agentmath": settings}


async def run_loop(tokenizer: Any, turns: list[str], *, settings: dict[str, Any] | None = None,
                   prompt_length: int = 512, response_length: int = 256,
                   sampling: dict[str, Any] | None = None, rollout: str = "vllm"
                   ) -> tuple[AgentLoopOutput, ScriptedServer, FakeServerManager]:
    server = ScriptedServer(tokenizer, turns)
    manager = FakeServerManager(server)
    config = verl_config(prompt_length=prompt_length, response_length=response_length,
                         rollout=rollout)
    loop = make_agent_loop(config, manager, tokenizer,
                           entry(**settings) if settings is not None else None)
    out = await loop.run(dict(sampling or SAMPLING), **dataset_fields(TASK))
    return out, server, manager


def test_registry_has_agentmath_and_verl_builds_it(tokenizer: Any) -> None:
    assert _agent_loop_registry["agentmath"] == {"_target_": TARGET}
    loop = make_agent_loop(verl_config(), FakeServerManager(None), tokenizer)
    assert isinstance(loop, AgentLoopBase) and isinstance(loop, AgentMathAgentLoop)
    assert loop.settings.format == "code_interpreter" and loop.rewards.keys == ["accuracy"]
    custom = make_agent_loop(verl_config(), FakeServerManager(None), tokenizer,
                             entry(format="deepmath", rewards="agentmath"))
    assert custom.fmt.name == "deepmath"
    assert custom.rewards.keys == ["accuracy", "tool_efficiency"]


async def test_output_is_token_exact_with_tool_tokens_masked(tokenizer: Any) -> None:
    out, server, manager = await run_loop(tokenizer, TURNS)
    assert isinstance(out, AgentLoopOutput)
    assert len(server.calls) == 3 and len(set(manager.request_ids)) == 1  # one sticky id
    prompt = server.calls[0]["prompt_ids"]
    assert out.prompt_ids == prompt
    # every context sent is exactly the prompt plus the response ids so far
    model_runs = runs(out.response_mask, 1)
    assert len(model_runs) == 3
    for call, (start, _) in zip(server.calls, model_runs, strict=True):
        assert call["prompt_ids"] == prompt + out.response_ids[:start]
    # mask 1 exactly on the ids the server sampled, in order; 0 on everything else
    sampled = [list(tokenizer.encode(t, add_special_tokens=False)) for t in TURNS]
    sampled[-1].append(tokenizer.eos_token_id)  # the answer turn ends with end-of-turn
    assert [out.response_ids[a:b] for a, b in model_runs] == sampled
    assert len(out.response_mask) == len(out.response_ids)
    assert out.num_turns == 6  # prompt + 3 model turns + 2 tool outputs


async def test_tool_tokens_are_the_sandboxs_real_output(tokenizer: Any) -> None:
    out, _, _ = await run_loop(tokenizer, TURNS)
    tool_text = [tokenizer.decode(out.response_ids[a:b]) for a, b in runs(out.response_mask, 0)]
    expected = await sandbox_outputs(CELLS)
    assert tool_text == expected
    assert "56211" in tool_text[0] and "56212" in tool_text[1]  # state kept across cells
    info = out.extra_fields["agentmath"]
    assert info["tool_calls"] == 2 and info["tool_errors"] == 0
    assert info["finish_reason"] == "answered" and info["answer"] == "56212"


async def test_logprobs_are_aligned_and_zero_on_tool_tokens(tokenizer: Any) -> None:
    out, _, _ = await run_loop(tokenizer, TURNS)
    assert out.response_logprobs is not None
    assert len(out.response_logprobs) == len(out.response_ids)
    for token, mask, logprob in zip(out.response_ids, out.response_mask,
                                    out.response_logprobs, strict=True):
        assert logprob == (pytest.approx(logprob_of(token)) if mask else 0.0)
    without, _, _ = await run_loop(tokenizer, TURNS, sampling={**SAMPLING, "logprobs": False})
    assert without.response_logprobs is None and without.response_ids == out.response_ids


@pytest.mark.parametrize(("rewards", "answer", "expected"), [
    ("accuracy", "56212", 1.0), ("accuracy", "7", 0.0),
    ("agentmath", "56212", 1.0 + 0.1 + 0.01 * 2), ("agentmath", "7", 0.0),
    ("deepmath", "56212", 0.1 + 1.0), ("deepmath", "7", 1.0),  # code use pays regardless
])
async def test_reward_score_is_agentmaths_reward(tokenizer: Any, rewards: str, answer: str,
                                                 expected: float) -> None:
    turns = [*TURNS[:2], f"So the answer is \\boxed{{{answer}}}."]
    out, _, _ = await run_loop(tokenizer, turns, settings={"rewards": rewards})
    assert out.reward_score == pytest.approx(expected)
    info = out.extra_fields["reward_extra_info"]
    assert info["score"] == pytest.approx(expected)
    assert info["acc"] == (1.0 if answer == "56212" else 0.0)
    assert "rm_scores" in out.as_dict()  # verl's own conversion puts the score in rm_scores
    assert float(out.as_dict()["rm_scores"][-1]) == pytest.approx(expected)


async def test_sampling_params_and_budget_follow_verls_lengths(tokenizer: Any) -> None:
    out, server, _ = await run_loop(tokenizer, TURNS)
    budget = len(out.prompt_ids) + 256  # prompt + verl's response_length
    for call in server.calls:
        params = call["sampling_params"]
        assert params["stop"] == ["\n</code>"] and params["include_stop_str_in_output"]
        assert params["temperature"] == 1.0 and params["logprobs"] is True
        assert params["max_tokens"] == budget - len(call["prompt_ids"])
    short, server, _ = await run_loop(tokenizer, TURNS, response_length=24)
    assert len(short.response_ids) <= 24
    assert all(c["sampling_params"]["max_tokens"] <= 24 for c in server.calls)
    assert short.extra_fields["agentmath"]["finish_reason"] == "token_budget"
    assert short.reward_score == 0.0


async def test_sglang_rollout_keeps_stop_strings_with_its_own_flag(tokenizer: Any) -> None:
    """verl's SGLang server hands the sampling dict to SGLang as is: vLLM's flag would be an
    unknown argument there, so the loop asks with SGLang's ``no_stop_trim``; same episode."""
    vllm_out, _, _ = await run_loop(tokenizer, TURNS)
    out, server, _ = await run_loop(tokenizer, TURNS, rollout="sglang")
    for call in server.calls:
        params = call["sampling_params"]
        assert params["stop"] == ["\n</code>"] and params["no_stop_trim"] is True
        assert "include_stop_str_in_output" not in params
    assert out.response_ids == vllm_out.response_ids
    assert out.response_mask == vllm_out.response_mask


def test_an_unknown_rollout_engine_is_named() -> None:
    from agentmath.errors import BackendError
    from agentmath.verl.backend import VerlBackend

    class Tok:
        eos_token_id = 0

    with pytest.raises(BackendError, match=r"rollout.name.*'trtllm'"):
        VerlBackend(None, Tok(), {}, engine="trtllm")


async def test_prompt_longer_than_verls_prompt_length_is_not_generated(tokenizer: Any) -> None:
    out, server, _ = await run_loop(tokenizer, TURNS, prompt_length=16)
    assert server.calls == [] and out.response_ids == [] and out.reward_score == 0.0
    assert len(out.prompt_ids) == 16
    assert "rollout.prompt_length=16" in out.extra_fields["agentmath"]["error"]


async def test_unmasked_ablation_and_failing_code(tokenizer: Any) -> None:
    turns = ["Try.\n<code>\nprint(1 / 0)\n</code>", "So \\boxed{1}."]
    out, _, _ = await run_loop(tokenizer, turns, settings={"mask_tool_tokens": False})
    assert set(out.response_mask) == {1}  # DeepMath's trainer: tool tokens carry loss too
    masked, _, _ = await run_loop(tokenizer, turns)
    (start, end), = runs(masked.response_mask, 0)
    assert tokenizer.decode(masked.response_ids[start:end]) == (
        await sandbox_outputs(["print(1 / 0)"]))[0]
    assert "ZeroDivisionError" in tokenizer.decode(masked.response_ids[start:end])
    assert masked.extra_fields["agentmath"]["tool_errors"] == 1
    assert masked.response_logprobs is not None
    assert all(not math.isnan(x) for x in masked.response_logprobs)
