"""The quickstart's server (``agentmath serve MODEL --rl --reasoning-parser qwen3``'s command
line, as the ``qwen3_vllm_server`` fixture starts it on the CPU build) serves a Qwen3-like
model: its served name, a chat request with tools rendered through the Qwen3-like template, and
the token ids the trainer needs."""

from __future__ import annotations

import httpx
import pytest

from tests.fixtures.vllm_server import QWEN3_SERVED_NAME

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

TOOLS = [{"type": "function", "function": {
    "name": "python", "description": "Run Python code.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]}}}]


def test_the_served_qwen3_like_model_answers_a_chat_with_tools(qwen3_vllm_server: str) -> None:
    models = httpx.get(f"{qwen3_vllm_server}/v1/models", timeout=30).json()
    # the base model first; LoRA adapters an RL recipe's test pushed may follow it
    assert models["data"][0]["id"] == QWEN3_SERVED_NAME
    reply = httpx.post(f"{qwen3_vllm_server}/v1/chat/completions", timeout=120, json={
        "model": QWEN3_SERVED_NAME, "max_tokens": 24, "temperature": 1.0, "seed": 0,
        "tools": TOOLS, "return_token_ids": True,
        "messages": [{"role": "user", "content": "What is 12 * 7 + 3?"}]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] in {"length", "stop", "tool_calls"}
    assert body["usage"]["completion_tokens"] == len(choice["token_ids"]) > 0
    # the prompt was rendered by the Qwen3-like template: tools listed in the system turn
    prompt_ids = body["prompt_token_ids"]
    detok = httpx.post(f"{qwen3_vllm_server}/detokenize", timeout=30,
                       json={"model": QWEN3_SERVED_NAME, "tokens": prompt_ids}).json()
    assert "<tools>" in detok["prompt"] and detok["prompt"].endswith("<|im_start|>assistant\n")


def test_the_server_runs_in_dev_mode_for_weight_pushes(qwen3_vllm_server: str) -> None:
    # /reset_prefix_cache exists only with VLLM_SERVER_DEV_MODE=1 (an RL run's pushes need it)
    reply = httpx.post(f"{qwen3_vllm_server}/reset_prefix_cache", timeout=30)
    assert reply.status_code == 200, reply.text
