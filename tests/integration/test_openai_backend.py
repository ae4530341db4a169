"""OpenAIBackend against a real vLLM (CPU) server serving the tiny trained model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentmath.agent.loop import build_messages
from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.errors import BackendError
from agentmath.formats import get_format
from tests.fixtures.models import held_out_problems

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

GREEDY = SamplingParams(temperature=0.0, logprobs=True)
# A held-out problem with the code_interpreter instructions: the test model calls the tool.
MESSAGES = build_messages(held_out_problems(1)[0].problem, get_format("code_interpreter"))
CONFIDENT = -0.1  # a greedy token with logprob above this has a wide margin over the runner-up


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_model_dir: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture
async def backend(vllm_server: str) -> AsyncIterator[OpenAIBackend]:
    client = OpenAIBackend(vllm_server, "tiny", timeout_s=60, max_retries=1)
    yield client
    await client.aclose()


def local_chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False)


async def test_render_prompt_and_tokenize_match_local_tokenizer(
        backend: OpenAIBackend, hf_tokenizer: Any, tiny_model_dir: Path) -> None:
    conversation = [*MESSAGES, {"role": "assistant", "content": "<code>\nprint(12 + 35)\n</code>"},
                    {"role": "tool", "content": "47"}]
    local = OpenAIBackend("http://unused.invalid", "tiny", tokenizer=str(tiny_model_dir))
    for messages in (MESSAGES, conversation):
        expected = local_chat_ids(hf_tokenizer, messages)
        assert await backend.render_prompt(messages) == expected
        assert await local.render_prompt(messages) == expected
    text = "```python\nprint(2**10)\n```\n```output\n1024\n```\n\\boxed{1024}"
    assert await backend.tokenize(text) == hf_tokenizer.encode(text, add_special_tokens=False)
    assert await local.tokenize(text) == await backend.tokenize(text)
    await local.aclose()


async def test_greedy_eos_ids_decode_to_text(backend: OpenAIBackend, hf_tokenizer: Any) -> None:
    prompt = await backend.render_prompt(MESSAGES)
    gen = await backend.generate(prompt, stop=[], max_tokens=200, sampling=GREEDY)
    assert gen.finish_reason == "eos" and gen.stop_string is None
    assert gen.token_ids[-1] == hf_tokenizer.eos_token_id
    assert decode(hf_tokenizer, gen.token_ids) == gen.text  # vLLM keeps <|im_end|> in text
    assert gen.info["prompt_token_ids"] == prompt
    assert gen.logprobs is not None and len(gen.logprobs) == len(gen.token_ids)
    assert all(lp <= 0.0 for lp in gen.logprobs)


async def test_stop_string(backend: OpenAIBackend, hf_tokenizer: Any) -> None:
    prompt = await backend.render_prompt(MESSAGES)
    gen = await backend.generate(prompt, stop=["</code>", "```output"], max_tokens=200,
                                 sampling=GREEDY)
    assert gen.finish_reason == "stop" and gen.stop_string in ("</code>", "```output")
    assert gen.text.endswith(gen.stop_string)
    # The last sampled token may run past the stop string: ids decode to text + overshoot.
    assert decode(hf_tokenizer, gen.token_ids).startswith(gen.text)
    assert hf_tokenizer.eos_token_id not in gen.token_ids
    assert len(gen.logprobs or []) == len(gen.token_ids)


async def test_length(backend: OpenAIBackend, hf_tokenizer: Any) -> None:
    prompt = await backend.render_prompt(MESSAGES)
    gen = await backend.generate(prompt, stop=["</code>"], max_tokens=5, sampling=GREEDY)
    assert gen.finish_reason == "length" and len(gen.token_ids) == 5
    assert decode(hf_tokenizer, gen.token_ids) == gen.text


async def test_continuation_uses_prompt_ids_verbatim(backend: OpenAIBackend) -> None:
    prompt = await backend.render_prompt(MESSAGES)
    first = await backend.generate(prompt, stop=["</code>"], max_tokens=100, sampling=GREEDY)
    assert first.finish_reason == "stop"
    tool_ids = await backend.tokenize("\n<interpreter>\n47\n</interpreter>\n")
    prompt2 = prompt + first.token_ids + tool_ids
    second = await backend.generate(prompt2, stop=[], max_tokens=60, sampling=GREEDY)
    assert second.info["prompt_token_ids"] == prompt2
    assert second.token_ids and second.finish_reason in ("eos", "length")

    # Greedy continuation from a prefix of a greedy output reproduces it while confident.
    full = await backend.generate(prompt, stop=[], max_tokens=40, sampling=GREEDY)
    sure = [lp > CONFIDENT for lp in full.logprobs or []]
    k = next(i for i in range(4, len(sure) - 3) if all(sure[i:i + 3]))
    cont = await backend.generate(prompt + full.token_ids[:k], stop=[], max_tokens=32,
                                  sampling=GREEDY)
    assert cont.info["prompt_token_ids"] == prompt + full.token_ids[:k]
    confident = next((i for i, lp in enumerate((full.logprobs or [])[k:]) if lp < CONFIDENT),
                     len(cont.token_ids))
    assert confident >= 3
    assert cont.token_ids[:confident] == full.token_ids[k:k + confident]


async def test_matches_hf_transformers_greedy(backend: OpenAIBackend, hf_tokenizer: Any,
                                              tiny_model_dir: Path) -> None:
    """Teacher-forced on transformers' greedy output: at every position where HF's top token
    wins by a clear margin, vLLM's greedy next token from the same prefix is the same."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    messages = build_messages(held_out_problems(1)[0].problem, get_format("code_interpreter"))
    prompt = local_chat_ids(hf_tokenizer, messages)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False,
                             output_scores=True, return_dict_in_generate=True)
    hf_ids = out.sequences[0, len(prompt):].tolist()
    # vLLM runs the fp32 checkpoint in bf16: near-ties (the digits this small model is unsure
    # of) may go either way, so only positions with a clear margin are compared.
    margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    confident = [k for k, m in enumerate(margins) if m >= 0.5]
    assert len(confident) >= 20, margins
    gens = await asyncio.gather(*(
        backend.generate(prompt + hf_ids[:k], stop=[], max_tokens=1, sampling=GREEDY)
        for k in confident))
    assert [g.token_ids[0] for g in gens] == [hf_ids[k] for k in confident]


async def test_sixteen_concurrent_requests(backend: OpenAIBackend) -> None:
    prompt = await backend.render_prompt(MESSAGES)
    sampling = [SamplingParams(temperature=1.0, seed=i) for i in range(16)]
    gens = await asyncio.gather(*(
        backend.generate(prompt, stop=["</code>"], max_tokens=32, sampling=s) for s in sampling))
    assert len(gens) == 16
    for gen in gens:
        assert gen.token_ids and len(gen.logprobs or []) == len(gen.token_ids)
        assert gen.finish_reason in ("stop", "eos", "length")


async def test_prefix_cache_reports_cached_tokens(backend: OpenAIBackend) -> None:
    shots = [{"role": r, "content": f"What is {i} + {i}?" if r == "user" else f"\\boxed{{{2 * i}}}"}
             for i in range(40) for r in ("user", "assistant")]
    prompt = await backend.render_prompt([*shots, MESSAGES[1]])
    await backend.generate(prompt, stop=[], max_tokens=2, sampling=GREEDY)
    again = await backend.generate(prompt, stop=[], max_tokens=2, sampling=GREEDY)
    assert again.info.get("cached_tokens", 0) > 0, again.info


async def test_client_errors_are_not_retried(vllm_server: str) -> None:
    wrong = OpenAIBackend(vllm_server, "no-such-model", max_retries=3, backoff_s=5.0)
    with pytest.raises(BackendError, match="no-such-model"):
        await asyncio.wait_for(wrong.generate([1, 2], stop=[], max_tokens=2, sampling=GREEDY), 4)
    await wrong.aclose()


async def test_chat_helper(backend: OpenAIBackend) -> None:
    message = await backend.chat(MESSAGES, max_tokens=30, sampling=GREEDY)
    assert message["role"] == "assistant" and isinstance(message["content"], str)
    assert message["finish_reason"] in ("stop", "length")
