"""What the model is shown first: the messages of an episode's prompt.

Kept apart from the loop because models are trained on exactly these prompts (SFT data, the
test model's cache key): changing this file changes what a trained model expects.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHAT_SYSTEM_PROMPT", "build_messages"]

CHAT_SYSTEM_PROMPT = ("Solve the problem step by step. You can call the `python` tool to run "
                      "code in a persistent session; put the final answer in \\boxed{}.")


def build_messages(problem: str, fmt: Any, system_prompt: str | None = None,
                   few_shot: Any = ()) -> list[dict[str, str]]:
    """System prompt (the format's instructions by default), few-shot pairs, then the problem."""
    messages = [{"role": "system", "content": system_prompt or fmt.instructions()}]
    for question, answer in few_shot:
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": problem})
    return messages
