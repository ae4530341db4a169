"""Chat templates that rewrite history: the detection and the per-turn split, on hand-made ids.

A native chat server renders the whole conversation at every turn. ``record_prompt`` is how the
chat driver records each turn's rendered prompt; these tests play the server by hand (the ids
of each prompt it rendered, the ids it sampled) and check that every training sequence is
exactly what the sampler saw: each turn's prompt followed by its sampled ids, the sampled ids
the only ones carrying loss, each exactly once.
"""

from __future__ import annotations

from agentmath.agent.drivers import record_prompt
from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.config import LoopConfig
from agentmath.rl.batch import ScoredSample, TrainSample, to_train_samples, trainable
from agentmath.rl.metrics import sample_stats
from agentmath.sandbox.result import ExecResult

MESSAGES = [{"role": "user", "content": "q"}]


def play(turns: list[tuple[list[int], list[int]]], rewrite: str = "per_turn") -> Trajectory:
    """A chat episode as the driver records it: for each turn the prompt the server rendered
    and the ids it sampled, a tool result between turns."""
    traj = Trajectory("q", [Segment("prompt", "[]", [])])
    for k, (prompt, sampled) in enumerate(turns):
        if k:
            traj.segments.append(Segment("tool", "42", [], code="print(42)",
                                         result=ExecResult(stdout="42\n")))
        record_prompt(traj, prompt, MESSAGES, rewrite)  # type: ignore[arg-type]
        traj.segments.append(Segment("model", "m", sampled, [-0.5] * len(sampled)))
    return traj


def scored(traj: Trajectory, advantage: float = 0.75) -> ScoredSample:
    return ScoredSample("g", 0, traj, 1.0, {}, True, advantage=advantage)


def assert_sampler_exact(samples: list[TrainSample],
                         turns: list[tuple[list[int], list[int]]]) -> None:
    """Every turn is in one sample as its prompt then its sampled ids (loss on those only),
    and the samples' loss tokens are the sampled ids, each turn's once."""
    for prompt, sampled in turns:
        end = len(prompt) + len(sampled)
        homes = [s for s in samples if s.ids[:end] == prompt + sampled
                 and s.mask[len(prompt):end] == [1] * len(sampled)]
        assert len(homes) == 1, (prompt, sampled)
    trained = [t for s in samples for t, m in zip(s.ids, s.mask, strict=True) if m]
    assert trained == [t for _, sampled in turns for t in sampled]


def test_a_template_that_extends_is_one_sequence_and_not_flagged() -> None:
    turns = [([1, 2, 3], [10, 11, 0]),
             ([1, 2, 3, 10, 11, 0, 20, 21], [12, 0]),
             ([1, 2, 3, 10, 11, 0, 20, 21, 12, 0, 22], [13, 0])]
    traj = play(turns)
    assert traj.history_rewrite is None and len(traj.sequences) == 1
    # the tool segments hold the template's render of the results: the ids are the context
    assert traj.token_ids == turns[-1][0] + turns[-1][1]
    assert [s.token_ids for s in traj.tool_calls] == [[20, 21], [22]]
    samples = to_train_samples(scored(traj))
    assert len(samples) == 1 and samples[0].ids == traj.token_ids
    assert_sampler_exact(samples, turns)


def test_a_rewritten_history_is_flagged_and_split_per_turn() -> None:
    # turn 2's prompt drops turn 1's reasoning (10) and keeps the rest; turn 3's extends
    # turn 2's; turn 4's drops turn 3's reasoning (13) again
    turns = [([1, 2, 3], [10, 11, 0]),
             ([1, 2, 3, 11, 0, 20], [12, 0]),
             ([1, 2, 3, 11, 0, 20, 12, 0, 21], [13, 14, 0]),
             ([1, 2, 3, 11, 0, 20, 12, 0, 21, 14, 0, 22], [15, 0])]
    traj = play(turns)
    assert traj.history_rewrite == "per_turn"
    assert [len(seq) for seq in traj.sequences] == [3, 5, 2]
    samples = to_train_samples(scored(traj, advantage=-0.5))
    assert [s.ids for s in samples] == [turns[0][0] + turns[0][1],
                                        turns[2][0] + turns[2][1],
                                        turns[3][0] + turns[3][1]]
    assert {s.advantage for s in samples} == {-0.5}  # the episode's, shared by its turns
    assert_sampler_exact(samples, turns)
    # the sampler's logprobs sit on the sampled ids only
    for s in samples:
        assert all((lp == -0.5) == bool(m) for lp, m in zip(s.sampler_logp, s.mask,
                                                              strict=True))
    # a loss normalised by tokens counts each sampled id once, as for the unsplit episode
    assert sum(sum(s.mask) for s in samples) == traj.model_tokens
    again = Trajectory.from_json(traj.to_json())
    assert again.history_rewrite == "per_turn"
    assert [len(seq) for seq in again.sequences] == [3, 5, 2]


def test_refuse_keeps_a_rewritten_episode_out_of_the_loss() -> None:
    turns = [([1, 2], [10, 0]), ([1, 2, 0, 20], [11, 0])]  # drops 10
    traj = play(turns, rewrite="refuse")
    assert traj.history_rewrite == "refuse" and not trainable(traj)
    assert to_train_samples(scored(traj)) == []
    kept = play(turns)
    stats = sample_stats([scored(traj), scored(kept), scored(play(turns[:1]))])
    assert (stats["rewritten_episodes"], stats["refused_episodes"]) == (2, 1)


def test_ids_the_server_did_not_report_are_not_trained_on() -> None:
    traj = play([([1, 2], [10, 0])])
    traj.token_exact = False
    assert to_train_samples(scored(traj)) == []


def test_the_first_rewrite_sets_the_flag_once() -> None:
    traj = play([([1], [10, 0])])
    assert record_prompt(traj, [1, 5], MESSAGES, "refuse") is True
    assert record_prompt(traj, [1, 6], MESSAGES, "per_turn") is True
    assert traj.history_rewrite == "refuse"
    assert LoopConfig().history_rewrite == "per_turn"
