"""The pausable episode: parked and resumed episodes are token-exact, sandbox state survives
parking, lost sessions are replayed, segments record policy versions (scripted backend)."""

from __future__ import annotations

import pytest

from agentmath.agent import Episode, run_chat_episode, run_episode
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig
from agentmath.formats import get_format
from tests.fixtures.chat_backends import AnsweringChat
from tests.fixtures.sandboxes import FakeSandbox

FMT = get_format("code_interpreter")
TURNS = [
    "Let me set x.\n<code>\nx = 41\nprint(x)\n</code>",
    "Now add one.\n<code>\nprint(x + 1)\n</code>",
    "The answer is \\boxed{42}.",
]


async def _unparked(turns: list[str] = TURNS, **loop: object) -> Episode:
    episode = Episode("q", ScriptedBackend(turns), FMT, FakeSandbox(), LoopConfig(**loop))
    assert await episode.advance()
    return episode


async def _parked(segment: int, turns: list[str] = TURNS, versions: bool = False,
                  sandbox: FakeSandbox | None = None, **loop: object) -> Episode:
    episode = Episode("q", ScriptedBackend(turns), FMT, sandbox or FakeSandbox(),
                      LoopConfig(**loop))
    version = 0
    for _ in range(10_000):
        if await episode.advance(max_tokens=segment, policy_version=version):
            return episode
        assert episode.status == "parked"
        version += versions
    raise AssertionError("the episode never finished")


@pytest.mark.parametrize("segment", [1, 2, 3, 5, 8, 13, 40, 1000])
async def test_parked_episode_equals_unparked(segment: int) -> None:
    """Every cut size, including cuts inside the stop string "\\n</code>", gives the same ids,
    texts, tool results and answer as the episode run in one go."""
    whole = await _unparked()
    cut = await _parked(segment)
    a, b = whole.trajectory, cut.trajectory
    assert b.token_ids == a.token_ids
    assert b.loss_mask == a.loss_mask
    assert b.completion_text == a.completion_text
    assert [s.result.stdout for s in b.tool_calls] == ["41\n", "42\n"]
    assert (b.finish_reason, b.answer) == (a.finish_reason, a.answer) == ("answered", "42")
    assert cut.model_used == whole.model_used == a.model_tokens
    if segment < 40:
        assert cut.advances > 1 and b.advances == cut.advances


async def test_stop_string_split_by_a_cut_is_not_run_past() -> None:
    """A cut landing inside the stop string: the server would match stops only in new text,
    so without care the turn would run on past "</code>"; the episode extends the cut turn a
    token at a time instead and the call is found where the uncut run finds it."""
    turn = "Go.\n<code>\nprint(7)\n</code> and then some hallucinated output"
    head = len(turn.encode()) - len(" and then some hallucinated output") - 4  # mid "</code>"
    whole = await _unparked([turn, "\\boxed{7}"])
    cut = await _parked(head, [turn, "\\boxed{7}"])
    assert cut.trajectory.token_ids == whole.trajectory.token_ids
    assert "hallucinated" not in cut.trajectory.model_text
    assert [s.result.stdout for s in cut.trajectory.tool_calls] == ["7\n"]


async def test_segments_record_policy_versions() -> None:
    episode = await _parked(8, versions=True)
    model = [s for s in episode.trajectory.segments if s.source == "model"]
    versions = [s.policy_version for s in model]
    assert versions == sorted(versions)  # each segment carries the version it ran under
    assert versions[0] == 0 and versions[-1] == episode.advances - 1
    assert episode.trajectory.policy_versions == sorted(set(versions))
    assert len(set(versions)) > 3
    assert Episode("q", ScriptedBackend(TURNS), FMT, None).tag.policy_version == 0


async def test_tool_call_budget_parks_with_the_call_pending() -> None:
    """max_tool_calls=1 per segment: the second call waits for the next segment, and the
    session (x = 41) is still there when it runs."""
    sandbox = FakeSandbox()
    episode = Episode("q", ScriptedBackend(TURNS), FMT, sandbox, LoopConfig())
    assert not await episode.advance(max_tool_calls=1)
    assert episode.calls == 1 and episode.session is not None
    assert await episode.advance(max_tool_calls=1)
    traj = episode.trajectory
    assert [s.result.stdout for s in traj.tool_calls] == ["41\n", "42\n"]
    assert traj.token_ids == (await _unparked()).trajectory.token_ids
    assert len(sandbox.sessions) == 1 and sandbox.open == 0  # one session, closed at the end


async def test_lost_session_is_rebuilt_by_replaying_cells() -> None:
    sandbox = FakeSandbox()
    episode = Episode("q", ScriptedBackend(TURNS), FMT, sandbox, LoopConfig())
    assert not await episode.advance(max_tool_calls=1)
    sandbox.sessions[0].lose()  # the process died while the episode was parked
    assert await episode.advance()
    traj = episode.trajectory
    assert [s.result.stdout for s in traj.tool_calls] == ["41\n", "42\n"]
    assert len(sandbox.sessions) == 2 and sandbox.sessions[1].ran[0] == "x = 41\nprint(x)"
    assert traj.session_replays == 1 and episode.replays == 1


async def test_closing_a_parked_episode_releases_its_session_and_it_can_resume() -> None:
    sandbox = FakeSandbox()
    episode = Episode("q", ScriptedBackend(TURNS), FMT, sandbox, LoopConfig())
    assert not await episode.advance(max_tool_calls=1)
    await episode.close()
    assert sandbox.open == 0
    assert await episode.advance()
    assert [s.result.stdout for s in episode.trajectory.tool_calls] == ["41\n", "42\n"]


async def test_time_limit_counts_only_active_time() -> None:
    """Time parked does not count against the episode's time limit."""
    episode = Episode("q", ScriptedBackend(TURNS, delay=0.05), FMT, FakeSandbox(),
                      LoopConfig(time_limit_s=0.12))
    finished = False
    while not finished:
        finished = await episode.advance(max_tool_calls=1)
    assert episode.trajectory.finish_reason == "time_budget"
    assert episode.active_s < 0.2


async def test_bad_segment_budget_is_a_clear_error() -> None:
    episode = Episode("q", ScriptedBackend(TURNS), FMT, FakeSandbox())
    with pytest.raises(ValueError, match="max_tokens of a segment"):
        await episode.advance(max_tokens=0)


async def test_run_episode_is_the_one_shot_episode() -> None:
    traj = await run_episode("q", ScriptedBackend(TURNS), FMT, FakeSandbox())
    assert traj.token_ids == (await _unparked()).trajectory.token_ids
    assert traj.advances == 1 and "advances" not in traj.to_dict()


class _ChatBackend:
    """Chat replies with usage counts: a long prompt must hit max_total_tokens."""

    name = "chat"

    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.calls = 0
        self.max_tokens: list[int] = []

    async def chat(self, messages, *, tools, max_tokens, sampling, **extra):  # noqa: ANN001
        self.calls += 1
        self.max_tokens.append(max_tokens)
        call = {"id": f"c{self.calls}", "type": "function",
                "function": {"name": "python", "arguments": '{"code": "print(1)"}'}}
        return {"role": "assistant", "content": "", "tool_calls": [call],
                "finish_reason": "tool_calls", "token_ids": [1] * 10,
                "usage": {"prompt_tokens": self.prompt_tokens + 20 * self.calls,
                          "completion_tokens": 10}}


async def test_chat_episode_honours_max_total_tokens() -> None:
    backend = _ChatBackend(prompt_tokens=100)
    traj = await run_chat_episode("q", backend, FakeSandbox(),
                                  LoopConfig(max_total_tokens=160, max_tool_calls=50))
    assert traj.finish_reason == "token_budget"
    # contexts of 130, 150 then 170 tokens: the third turn may only use the 10 left
    assert backend.calls == 3 and backend.max_tokens[-1] == 10
    assert traj.token_exact is False


async def test_a_parked_chat_episode_moves_with_its_messages() -> None:
    """A chat episode restored elsewhere takes its conversation from the trajectory's
    ``messages`` field and goes on sending it."""
    backend, fmt = AnsweringChat(), get_format("openai_tools")
    first = Episode("q", backend, fmt, FakeSandbox(), chat=True)
    assert not await first.advance(max_turns=1)
    moved = Episode("q", backend, fmt, FakeSandbox(), chat=True)
    moved.restore(first.progress())
    assert moved.driver.messages is moved.trajectory.messages  # the live list, shared
    assert await moved.advance()
    traj = moved.trajectory
    assert backend.sent[-1] == ["system", "user", "assistant", "tool"]
    assert [m["role"] for m in traj.messages] == backend.sent[-1]
    assert (traj.answer, traj.token_exact, traj.advances) == ("42", False, 2)
    assert "messages" not in traj.meta and "token_exact" not in traj.meta
