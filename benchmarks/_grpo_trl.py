"""The baseline half of ``benchmarks/grpo.py``: TRL's ``GRPOTrainer`` with its own multi-turn
tool loop, on the CPU, with agentmath's sandbox as the tool and agentmath's grader as the reward.

What TRL needs from a model, and how this file gives it (TRL 1.16, transformers >= 5.13):

* Tool calls are parsed by ``tokenizer.parse_response`` with a *response template*. TRL sets one
  only for chat templates it recognises by exact string (``add_response_schema``); agentmath's
  tiny-model template (``agentmath.models.tiny.CHAT_TEMPLATE``) is not one of them, so it is set
  here by hand: TRL's own Qwen3 template, the one it uses for Qwen2.5/Qwen3, whose
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` JSON format is what the model was
  trained to write.
* The chat template must be prefix-preserving (TRL appends the tool turn's ids without
  re-tokenizing); agentmath's is, and :func:`check_trl_template` asserts it, so TRL keeps it.
* TRL renders the tool schema from the Python signature and docstring
  (``transformers.utils.get_json_schema``). :class:`PythonEnv.python` is written so that this
  schema is exactly ``agentmath.formats.openai_tools.tool_spec()``, the schema of the model's
  native-tool-calling training records (no return annotation: it would add a non-OpenAI
  ``"return"`` key); :func:`check_trl_template` renders a prompt both ways and compares them.
* The start model is trained on a text/tool mixture: a native text record is the same prompt
  (same system prompt and tools schema) with an assistant turn that answers in text. TRL must
  read such a turn as "no tool call" (the episode ends there and is graded):
  :func:`check_trl_template` renders a text record's assistant turn with the template and
  parses it with TRL's own ``parse_response``.

Checkpoints for the accuracy-against-time curve: a callback saves the model (weights and
tokenizer only) at the steps asked for, after it has stopped that step's clock; the time the
saves take is left out of the run's cumulative wall time.

Per-trajectory state: the model's code uses variables from its earlier calls (the sandbox session
is persistent). A plain ``tools=[fn]`` callable has no per-trajectory state in TRL's loop, so each
call would need a fresh session (every second call then fails with ``NameError``) or one shared
session (trajectories overwrite each other's variables). TRL's documented answer is
``environment_factory``: one environment object per rollout, reset per prompt, whose public
methods become the tools, rendered and parsed exactly like ``tools=``, by the same
``_tool_call_loop``. That is the default here (``stateful=True``); ``stateful=False`` runs plain
``tools=[python]`` with a fresh session per call, to show the limit.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from _grpo_report import Consumed

from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT
from agentmath.config import SandboxConfig
from agentmath.formats.base import render_body
from agentmath.formats.openai_tools import tool_spec

# The sandbox every tool call of the TRL run goes to (a sync pool on its own thread), set by
# run_trl for the length of the run: TRL builds environments through a zero-argument factory.
_SANDBOX: Any = None
_LIMITS = {"timeout": 10.0, "max_chars": 2000}


def _run_code(session: Any, code: str) -> str:
    """Run ``code`` in ``session``; what the model reads (as agentmath's loop renders it)."""
    result = session.run(code, timeout=_LIMITS["timeout"])
    return render_body(result, max_chars=int(_LIMITS["max_chars"]))


class PythonEnv:
    """One rollout's sandbox session; TRL exposes :meth:`python` to the model as its tool."""

    def __init__(self) -> None:
        self._session: Any = None

    def reset(self, **example: Any) -> None:
        """A new rollout: drop the old session (its variables), open a fresh one."""
        if self._session is not None:
            self._session.close()
        self._session = _SANDBOX.session()

    def python(self, code: str):  # noqa: ANN201 - a return annotation changes TRL's schema
        """
        Run Python code in a persistent session (variables and imports carry over between calls). Returns the printed output, then the value of the last expression, or the error.

        Args:
            code: The Python code to run.
        """  # noqa: E501 - get_json_schema takes the description from these lines as they are
        return _run_code(self._session, code)

    def _close(self) -> None:  # private: TRL turns every public method into a tool
        if self._session is not None:
            self._session.close()
            self._session = None


def python(code: str):  # noqa: ANN201 - a return annotation changes TRL's schema
    """
    Run Python code in a persistent session (variables and imports carry over between calls). Returns the printed output, then the value of the last expression, or the error.

    Args:
        code: The Python code to run.
    """  # noqa: E501
    session = _SANDBOX.session()  # stateless: TRL's tools= loop has no per-rollout state
    try:
        return _run_code(session, code)
    finally:
        session.close()


def completion_text(completion: Any) -> str:
    """The model-written text of one TRL completion (assistant contents; tool turns skipped)."""
    if isinstance(completion, str):
        return completion
    return "\n".join(m.get("content") or "" for m in completion
                     if isinstance(m, dict) and m.get("role") == "assistant")


def accuracy_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """1.0 when the final answer of the model's text grades correct (agentmath's grader, the
    same call ``agentmath.rl.rewards.is_correct`` makes), else 0.0."""
    from agentmath import grading
    from agentmath.errors import GradingError

    scores = []
    for completion, gold in zip(completions, answer, strict=True):
        try:
            ok = grading.grade(str(gold), completion_text(completion)).correct
        except GradingError:
            ok = False
        scores.append(1.0 if ok else 0.0)
    return scores


class GenerationTally:
    """TRL's generations, counted where TRL hands them over: its reward function is called
    once per generation batch with every completion it generated and the prompt of each
    (one batch a step here: ``steps_per_generation`` is left at its default, 1). Pass
    :meth:`accuracy_reward` as the reward function."""

    def __init__(self) -> None:
        self.batches: list[Consumed] = []

    def accuracy_reward(self, completions: list[Any], answer: list[str], *,
                        prompts: list[Any], trainer_state: Any, **_: Any) -> list[float]:
        """:func:`accuracy_reward`, after counting the batch under the step it trains
        (TRL's ``global_step`` counts the steps already done)."""
        distinct = {json.dumps(p, sort_keys=True) for p in prompts}
        self.batches.append(Consumed(trainer_state.global_step + 1, len(distinct),
                                     len(completions)))
        return accuracy_reward(completions, answer)

    def per_step(self) -> list[Consumed]:
        """One record a step, in step order (batches of the same step summed)."""
        steps: dict[int, Consumed] = {}
        for b in self.batches:
            old = steps.get(b.step, Consumed(b.step, 0, 0))
            steps[b.step] = Consumed(b.step, old.prompts + b.prompts, old.samples + b.samples)
        return [steps[k] for k in sorted(steps)]


def trl_prompt(problem: str) -> list[dict[str, str]]:
    """The native-tool-calling prompt the model was trained on (tools are added by the
    template, from the tool schema)."""
    return [{"role": "system", "content": CHAT_SYSTEM_PROMPT}, {"role": "user", "content": problem}]


def prepare_tokenizer(model_dir: str) -> Any:
    """The model's tokenizer with TRL's Qwen3 response template (see the module docstring)."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_template

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.response_template = qwen3_template
    return tokenizer


def check_trl_template(tokenizer: Any, problem: str,
                       solution: str | None = None) -> dict[str, Any]:
    """Assert what TRL's tool loop relies on; returns what was checked.

    * the tool schema TRL renders from :meth:`PythonEnv.python` (and :func:`python`) gives the
      same prompt, character for character, as the schema the model was trained with;
    * the template is prefix-preserving (TRL keeps it instead of swapping in its own);
    * a tool call written as the model writes it parses to the ``python`` tool;
    * with ``solution`` (the problem's text solution): the native text record the mixed
      model is trained on (``agentmath.synth.tool_records.text_record``) has the prompt TRL
      renders, and its assistant turn, rendered by the template and parsed by TRL's
      ``parse_response``, is plain content with no tool call (TRL's loop ends the episode).
    """
    from trl.chat_template_utils import (
        is_chat_template_prefix_preserving,
        parse_response,
        supports_tool_calling,
    )

    messages = trl_prompt(problem)
    trained = tokenizer.apply_chat_template(messages, tools=[tool_spec()], tokenize=False,
                                            add_generation_prompt=True)
    for fn in (PythonEnv().python, python):
        rendered = tokenizer.apply_chat_template(messages, tools=[fn], tokenize=False,
                                                 add_generation_prompt=True)
        if rendered != trained:
            raise RuntimeError("TRL would render a different tool schema than the model was "
                               f"trained with:\n{rendered}\n---\n{trained}")
    if not is_chat_template_prefix_preserving(tokenizer):
        raise RuntimeError("the chat template is not prefix-preserving: TRL would replace it")
    if not supports_tool_calling(tokenizer):
        raise RuntimeError("TRL says the chat template cannot render tool calls")
    text = ('I compute it.\n<tool_call>\n{"name": "python", "arguments": '
            '{"code": "x = 2 * 3\\nprint(x)"}}\n</tool_call><|im_end|>')
    parsed = tokenizer.parse_response(text, prefix=trained)
    calls = parsed.get("tool_calls") or []
    if not calls or calls[0]["function"]["name"] != "python" \
            or calls[0]["function"]["arguments"] != {"code": "x = 2 * 3\nprint(x)"}:
        raise RuntimeError(f"TRL's response template does not parse a python call: {parsed}")
    checks = {"schema_identical": True, "prefix_preserving": True, "call_parses": True,
              "prompt_chars": len(trained)}
    if solution is not None:
        from agentmath.synth.config import NATIVE
        from agentmath.synth.tool_records import text_record
        from agentmath.tasks import Task

        record = text_record(Task("check", problem, "", {"solution": solution}), NATIVE)
        if record["messages"][:-1] != messages or record["tools"] != [tool_spec()]:
            raise RuntimeError("a native text record's prompt is not the one TRL renders: "
                               f"{record['messages'][:-1]} / {messages}")
        checks["text_answer_ends_episode"] = check_text_answer(
            tokenizer, messages, record["messages"][-1]["content"], parse_response)
    return checks


def check_text_answer(tokenizer: Any, messages: list[dict[str, str]], answer: str,
                      parse: Any) -> bool:
    """The ids a native text record trains the model to write after ``messages`` (up to its
    end-of-turn token) parse, with TRL's parser, to ``answer`` as content and no tool call."""
    tools = [tool_spec()]
    prompt_ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True,
                                               add_generation_prompt=True, return_dict=False)
    full_ids = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": answer}], tools=tools, tokenize=True,
        return_dict=False)
    if list(full_ids[:len(prompt_ids)]) != list(prompt_ids):
        raise RuntimeError("a text answer's record does not start with the prompt TRL renders")
    completion = list(full_ids[len(prompt_ids):])
    eos = tokenizer.eos_token_id
    if eos in completion:  # generation stops at the end-of-turn token; the template's "\n"
        completion = completion[:completion.index(eos) + 1]
    parsed = parse(tokenizer, completion, prefix=list(prompt_ids), tools=tools)
    if parsed.get("tool_calls") or (parsed.get("content") or "").strip() != answer.strip():
        raise RuntimeError(f"TRL does not read a text answer as a turn without tool calls: "
                           f"{parsed}")
    return True


def run_trl(model_dir: str, train_rows: list[dict[str, Any]], out: Path, *, steps: int,
            group_size: int, prompts_per_step: int, learning_rate: float, temperature: float,
            max_completion_length: int, max_tool_calls: int, seed: int,
            stateful: bool = True, tool_timeout_s: float = 10.0,
            max_output_chars: int = 2000,
            save_steps: Collection[int] = ()) -> dict[str, Any]:
    """Train with TRL's GRPOTrainer; per-step wall times and logs, and the saved models.

    The model is saved to ``out/step-N`` after each step N in ``save_steps`` and after the
    last (``final_dir``); ``checkpoints`` lists them with the cumulative training wall time
    at each (from the first step's start, the saves left out) and the sum of step times;
    ``consumed`` the prompts and samples of each step (:class:`GenerationTally`)."""
    global _SANDBOX
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import datasets
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentmath.sandbox import Sandbox

    started = time.monotonic()
    tokenizer = prepare_tokenizer(model_dir)
    checks = check_trl_template(tokenizer, train_rows[0]["problem"],
                                train_rows[0].get("solution"))
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    data = datasets.Dataset.from_list([{"prompt": trl_prompt(r["problem"]),
                                        "answer": str(r["answer"])} for r in train_rows])
    args = GRPOConfig(
        output_dir=str(out), use_vllm=False, use_cpu=True, bf16=False, fp16=False,
        gradient_checkpointing=False, seed=seed, data_seed=seed, shuffle_dataset=False,
        num_generations=group_size, per_device_train_batch_size=group_size * prompts_per_step,
        gradient_accumulation_steps=1, max_steps=steps,
        max_completion_length=max_completion_length, max_tool_calling_iterations=max_tool_calls,
        temperature=temperature, top_p=1.0, top_k=0,
        learning_rate=learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0,
        # the same objective as agentmath's defaults: token-level (DAPO) aggregation, group
        # std-normalised advantages, clip 0.2 / 0.28, no KL
        loss_type="dapo", scale_rewards="group", epsilon=0.2, epsilon_high=0.28, beta=0.0,
        logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, log_completions=False)

    save_at = {int(s) for s in save_steps} | {steps}

    class Timer(TrainerCallback):
        """Per-step times; the model saved at ``save_at`` steps, out of the clock."""

        def __init__(self) -> None:
            self.step_s: list[float] = []
            self.logs: list[dict[str, Any]] = []
            self.checkpoints: list[dict[str, Any]] = []
            self.saving_s = 0.0
            self._t = self._t0 = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self._t = time.monotonic()
            if not self.step_s:
                self._t0 = self._t

        def on_step_end(self, _args: Any, state: Any, _control: Any, model: Any = None,
                        **k: Any) -> None:
            now = time.monotonic()
            self.step_s.append(now - self._t)
            if state.global_step in save_at:
                target = out / f"step-{state.global_step}"
                model.save_pretrained(str(target))
                tokenizer.save_pretrained(str(target))
                self.checkpoints.append({
                    "step": state.global_step, "dir": str(target),
                    "wall_s": now - self._t0 - self.saving_s,
                    "step_s_sum": sum(self.step_s)})
                self.saving_s += time.monotonic() - now

        def on_log(self, _args: Any, state: Any, _control: Any, logs: Any = None,
                   **k: Any) -> None:
            if logs:
                self.logs.append({"step": state.global_step, **logs})

    timer, tally = Timer(), GenerationTally()
    _LIMITS.update(timeout=tool_timeout_s, max_chars=max_output_chars)
    tool_kwargs: dict[str, Any] = ({"environment_factory": PythonEnv} if stateful
                                   else {"tools": [python]})
    _SANDBOX = Sandbox(SandboxConfig(timeout_s=tool_timeout_s))
    trainer = None
    try:
        trainer = GRPOTrainer(model=model, reward_funcs=[tally.accuracy_reward], args=args,
                              train_dataset=data, processing_class=tokenizer,
                              callbacks=[timer], **tool_kwargs)
        setup_s = time.monotonic() - started
        trainer.train()
    finally:
        for envs in (getattr(trainer, "_environment_pool", None) or {}).values():
            for env in envs:
                env._close()
        _SANDBOX.close()
        _SANDBOX = None
    step_logs = [log for log in timer.logs if "reward" in log]
    return {"final_dir": timer.checkpoints[-1]["dir"], "step_s": timer.step_s,
            "checkpoints": timer.checkpoints, "logs": step_logs, "setup_s": setup_s,
            "saving_s": timer.saving_s, "wall_s": time.monotonic() - started, "checks": checks,
            "tool_mode": "environment_factory" if stateful else "tools",
            "consumed": tally.per_step()}
