"""agentmath's agent loop as a verl agent loop: ``agent_name: agentmath``.

verl (0.9.1, ``verl.experimental.agent_loop``) runs one ``AgentLoopBase.run`` per sample in
its agent-loop workers, generating through its ``server_manager``. This loop runs agentmath's
own :class:`~agentmath.agent.episode.Episode` there, unchanged: the tool format's prompt and
markers (``<code>`` / ``<interpreter>`` by default), code run in agentmath's sandbox (a local
pool per worker process, or sandbox services), agentmath's budgets and finish reasons, and a
token-exact trajectory; generation goes through :class:`~agentmath.verl.backend.VerlBackend`
over verl's server manager. The trajectory is scored by agentmath's reward model (accuracy,
AgentMath's tool efficiency, DeepMath's code use, ...) and returned as verl's
``AgentLoopOutput``: response = model and tool tokens, ``response_mask`` 1 on model tokens
and 0 on tool tokens, the sampler's logprobs (0.0 on tool tokens), ``reward_score`` set (so
verl's reward loop is skipped for it) and the reward terms as ``reward_extra_info``.

Registered under ``agentmath`` when this module is imported; the agent-loop YAML
(``rollout.agent.agent_loop_config_path``, e.g. configs/verl/agent_loop.yaml) names it by
``_target_`` so verl's workers import it, and passes its ``agentmath:`` settings
(:class:`~agentmath.verl.settings.VerlLoopSettings`). Imports verl: only verl's environment
(``.venv-verl``, ``scripts/install_verl.sh``) imports this module.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from agentmath.agent.episode import Episode
from agentmath.agent.trajectory import Trajectory
from agentmath.formats import get_format
from agentmath.rl.rewards import RewardBreakdown
from agentmath.tasks import Task
from agentmath.verl.backend import VerlBackend, sampling_from_verl
from agentmath.verl.convert import VerlSample, to_verl_sample
from agentmath.verl.data import AGENT_NAME, task_from_fields
from agentmath.verl.settings import load_settings, reward_model, shared_sandbox


@register(AGENT_NAME)
class AgentMathAgentLoop(AgentLoopBase):
    """verl agent loop that runs one agentmath episode per sample (see the module docstring).

    ``agentmath`` is the settings mapping from the agent-loop YAML (None: defaults); verl's
    own constructor arguments pass through to ``AgentLoopBase``.
    """

    def __init__(self, *args: Any, agentmath: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = load_settings(agentmath)
        self.fmt = get_format(self.settings.format)
        self.rewards = reward_model(self.settings)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Run one episode of the sample's problem and return it as verl's output.

        ``kwargs`` are the dataset's fields (``raw_prompt``, ``reward_model``,
        ``extra_info``, ``uid``, ...). Model, sandbox and budget failures do not raise: the
        episode ends with its finish reason, scores what it earned (an errored episode 0) and
        is returned like any other.
        """
        task = task_from_fields(kwargs, self.settings.problem_key)
        group = str(kwargs.get("uid") or task.id)
        episode_id = f"{group}-{uuid.uuid4().hex[:12]}"
        backend = VerlBackend(self.server_manager, self.tokenizer, sampling_params,
                              request_id=episode_id,
                              eos_token_ids=self.settings.eos_token_ids,
                              chat_template_kwargs=self.apply_chat_template_kwargs,
                              engine=str(getattr(self.rollout_config, "name", "vllm")))
        sandbox = await shared_sandbox(self.settings)
        episode = Episode(task.problem, backend, self.fmt, sandbox, self.settings.loop,
                          sampling_from_verl(sampling_params), episode_id=episode_id,
                          group_id=group, meta={"task_id": task.id, "engine": "verl"})
        try:
            await self._run_episode(episode)
        finally:
            await episode.close()
        trajectory = episode.trajectory
        breakdown = await self.rewards.ascore(task, trajectory)
        sample = to_verl_sample(trajectory, self.rollout_config.response_length,
                                mask_tool_tokens=self.settings.mask_tool_tokens)
        return self._output(task, trajectory, sample, breakdown, backend.preempted)

    async def _run_episode(self, episode: Episode) -> None:
        """Render the prompt, fit the episode's context to verl's lengths, run it."""
        if not await episode.prepare():
            return
        prompt_len = episode.trajectory.prompt_length
        limit = self.rollout_config.prompt_length
        if prompt_len > limit:  # verl's tensors cannot hold it; never generate from a cut one
            episode.trajectory.finish_reason = "error"
            episode.trajectory.error = (f"prompt of {prompt_len} tokens exceeds verl's "
                                        f"rollout.prompt_length={limit}")
            return
        budget = prompt_len + self.rollout_config.response_length
        cfg = episode.config
        if cfg.max_total_tokens > budget:
            episode.config = cfg.model_copy(update={"max_total_tokens": budget})
        await episode.advance()

    def _output(self, task: Task, trajectory: Trajectory, sample: VerlSample,
                breakdown: RewardBreakdown, preempted: int | None) -> AgentLoopOutput:
        """verl's AgentLoopOutput of a scored trajectory."""
        prompt_ids = sample.prompt_ids[-self.rollout_config.prompt_length:]
        calls = trajectory.tool_calls
        info = {"score": breakdown.total, "acc": float(breakdown.correct), **breakdown.terms}
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=sample.response_ids,
            response_mask=sample.response_mask,
            response_logprobs=sample.response_logprobs,
            reward_score=breakdown.total,
            num_turns=sample.num_turns,
            metrics=AgentLoopMetrics(generate_sequences=sample.generate_s,
                                     tool_calls=sample.tool_s,
                                     num_preempted=-1 if preempted is None else preempted),
            extra_fields={
                "reward_extra_info": info,
                "turn_scores": [], "tool_rewards": [],  # the schema of verl's own loops
                "agentmath": {
                    "task_id": task.id, "finish_reason": trajectory.finish_reason,
                    "error": trajectory.error, "answer": trajectory.answer,
                    "tool_calls": len(calls), "tool_errors": trajectory.num_tool_errors,
                    "model_tokens": trajectory.model_tokens,
                    "tool_tokens": trajectory.tool_tokens, "truncated": sample.truncated,
                },
            },
        )
