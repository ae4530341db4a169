"""Which rollouts a GRPO step trains on: the stabilisers of multi-turn tool RL.

Each filter is a small pure function on plain data (correct flags, penalties, a seeded RNG),
with a thin adapter over :class:`~agentmath.rl.batch.ScoredGroup`. :func:`filter_group` chains
them in the order :func:`~agentmath.rl.rollouts.collect_groups` applies them, after scoring and
before dynamic sampling:

1. **pass rate** (DAPO; SimpleTIR's ``--acc_filter``): a group whose measured pass rate (correct
   / every sample generated for it) is not strictly inside the bounds carries little or no
   GRPO signal, and is dropped whole;
2. **void turns** (SimpleTIR, arXiv 2509.02479): an episode with a model turn that neither ran
   code nor gave a final answer is left out of the update (such turns come with the
   low-probability tokens that make importance ratios and gradient norms explode);
3. **resample on correct** (GRPO-RoC, rStar2-Agent arXiv 2508.20722 §2.2): of the oversampled
   group, G are kept: failed episodes uniformly, correct ones preferring few tool errors and a
   clean format, so that the update does not reinforce answers reached through broken code.

No torch; everything is deterministic given the RNG the caller seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentmath.agent.trajectory import Trajectory
from agentmath.grading.extract import extract_answer
from agentmath.rl.batch import ScoredGroup, ScoredSample
from agentmath.rl.rewards import PROPER_FINISH

if TYPE_CHECKING:
    from agentmath.rl.config import FilterConfig, RLConfig

#: rStar2-Agent's tool-error ratio of an episode without a tool call: neither clean nor broken.
NO_TOOL_ERROR_RATIO = 0.5
#: Added to a penalty before inverting it into a sampling weight, so that a clean episode
#: (penalty 0) is 10x likelier to be kept than one with a penalty of 0.9, not certain.
ROC_PENALTY_FLOOR = 0.1


# ---------------------------------------------------------------- pass rate
def pass_rate(correct: Sequence[bool]) -> float:
    """The fraction of correct samples (0 for an empty group)."""
    return sum(map(bool, correct)) / len(correct) if correct else 0.0


def pass_rate_inside(rate: float, low: float, high: float) -> bool:
    """Whether ``rate`` lies strictly between ``low`` and ``high``: with (0, 1), a group that
    is all wrong or all right (no accuracy signal) is out."""
    return low < rate < high


# ---------------------------------------------------------------- void turns
@dataclass(frozen=True, slots=True)
class Turn:
    """One model turn: what the model wrote (all its model segments), whether a tool call
    with code ran after it, and whether it is the episode's last turn."""

    text: str
    ran_code: bool
    last: bool


def model_turns(trajectory: Trajectory) -> list[Turn]:
    """The model turns of a trajectory, in order.

    A turn is a maximal run of consecutive model segments (partial rollout can cut one turn
    into several segments, continued later under newer weights); the tool segments after it
    are its calls. A tool segment counts as code that ran when it carries ``code``: a native
    tool call the loop could not read (``code`` None, an error fed back) ran nothing.
    """
    texts: list[list[str]] = []
    ran: list[bool] = []
    previous = None
    for seg in trajectory.segments:
        if seg.source == "model":
            if previous == "model":
                texts[-1].append(seg.text)
            else:
                texts.append([seg.text])
                ran.append(False)
        elif seg.source == "tool" and ran and seg.code is not None:
            ran[-1] = True
        previous = seg.source
    return [Turn("".join(t), r, i == len(texts) - 1)
            for i, (t, r) in enumerate(zip(texts, ran, strict=True))]


def is_void(turn: Turn, finish_reason: str) -> bool:
    """Whether a turn is void: no code of it ran and it holds no final answer (the loop's
    own extraction, the one that ends an episode on an answer).

    The episode's last turn is void only when the episode ended on its own (``answered`` or
    ``eos``): a turn cut by the token budget was not finished by the model, and one whose code
    the tool budget (or time, or an error) kept from running did write a code block, so a
    budget is never the model's void turn by itself. An earlier turn ended in tool calls (else
    the episode would have ended there), so it is void only when none of them carried code.
    """
    if turn.ran_code or extract_answer(turn.text) is not None:
        return False
    return not turn.last or finish_reason in PROPER_FINISH


def has_void_turn(trajectory: Trajectory) -> bool:
    """Whether any model turn of the trajectory is void (:func:`is_void`); SimpleTIR drops such
    trajectories from the update."""
    return any(is_void(t, trajectory.finish_reason) for t in model_turns(trajectory))


def void_survivors(void: Sequence[bool], rewards: Sequence[float]) -> list[int] | None:
    """Indices of the samples without a void turn, or None when leaving the void ones out
    leaves the group fewer than 2 samples or no reward variance (no GRPO signal: the whole
    group goes). A group with no void sample is returned whole, as it was."""
    kept = [i for i, v in enumerate(void) if not v]
    if len(kept) == len(void):
        return kept
    if len(kept) < 2 or len({round(rewards[i], 9) for i in kept}) < 2:
        return None
    return kept


# ---------------------------------------------------------------- resample on correct
def tool_error_ratio(trajectory: Trajectory) -> float:
    """Failed tool calls (an error, a timeout, a crash) / tool calls; an episode without a
    tool call counts :data:`NO_TOOL_ERROR_RATIO` (rStar2-Agent's choice)."""
    calls = trajectory.tool_calls
    if not calls:
        return NO_TOOL_ERROR_RATIO
    return sum(1 for s in calls if s.result is not None and not s.result.ok) / len(calls)


def format_penalty(trajectory: Trajectory) -> float:
    """1 when the episode has no final answer or a void turn, else 0 (rStar2-Agent penalises
    a missing or repeated answer tag; an agentmath episode's format faults are these)."""
    return 1.0 if trajectory.answer is None or has_void_turn(trajectory) else 0.0


def roc_penalty(trajectory: Trajectory) -> float:
    """GRPO-RoC's penalty of a correct episode, in [0, 2]: tool-error ratio + format."""
    return tool_error_ratio(trajectory) + format_penalty(trajectory)


def roc_quota(n_correct: int, n_failed: int, keep: int) -> tuple[int, int]:
    """How many (correct, failed) samples to keep of a group, ``keep`` in all.

    Each side keeps its share of the group (rounded half up), as rStar2-Agent's code does
    (``recipe/rstar2_agent/src/roc``), so that the kept group's pass rate is about the measured
    one: with oversample 2, about half of each side stays. A group with both sides keeps at
    least one of each (its reward variance survives); a side short of its quota is filled from
    the other. A group of ``keep`` or fewer keeps everything.
    """
    n = n_correct + n_failed
    if n <= keep:
        return n_correct, n_failed
    failed = math.floor(n_failed * keep / n + 0.5)
    if n_correct and n_failed:
        failed = min(max(failed, 1), keep - 1)
    correct = min(keep - min(failed, n_failed), n_correct)
    return correct, keep - correct


def weighted_sample(weights: Sequence[float], k: int, rng: random.Random) -> list[int]:
    """``k`` distinct indices, each next one drawn with probability proportional to its weight
    among those left (Efraimidis & Spirakis 2006: the ``k`` largest ``u ** (1 / w)``)."""
    keys = [rng.random() ** (1.0 / w) for w in weights]
    return sorted(range(len(weights)), key=lambda i: keys[i], reverse=True)[:k]


def resample_on_correct(correct: Sequence[bool], penalties: Sequence[float], keep: int,
                        rng: random.Random) -> list[int]:
    """GRPO-RoC: the indices (ascending) of the ``keep`` samples a group trains on.

    Counts per side by :func:`roc_quota`; failed samples uniformly at random (varied failures
    are informative negatives); correct ones by :func:`weighted_sample` with weight
    ``1 / (penalty + ROC_PENALTY_FLOOR)``, so the probability of being kept falls with the
    penalty (:func:`roc_penalty`) and clean successes are what the update reinforces.
    """
    if len(correct) != len(penalties):
        raise ValueError(f"{len(correct)} correct flags but {len(penalties)} penalties")
    if any(p < 0 or not math.isfinite(p) for p in penalties):
        raise ValueError(f"penalties must be finite and >= 0, got {list(penalties)}")
    good = [i for i, c in enumerate(correct) if c]
    bad = [i for i, c in enumerate(correct) if not c]
    n_good, n_bad = roc_quota(len(good), len(bad), keep)
    kept_bad = rng.sample(bad, n_bad)
    weights = [1.0 / (penalties[i] + ROC_PENALTY_FLOOR) for i in good]
    kept_good = [good[j] for j in weighted_sample(weights, n_good, rng)]
    return sorted(kept_bad + kept_good)


# ---------------------------------------------------------------- over scored groups
@dataclass(frozen=True, slots=True)
class FilterPlan:
    """The filters of one step: the settings, the group size G that resample-on-correct
    keeps, and the run seed and step that seed it (with each group's identity)."""

    config: FilterConfig
    group_size: int
    seed: int
    step: int

    @classmethod
    def of(cls, config: RLConfig, step: int) -> FilterPlan:
        return cls(config.filters, config.group_size, config.seed, step)


@dataclass(slots=True)
class GroupVerdict:
    """What the filters did to one group."""

    group: ScoredGroup | None  # what to go on with (maybe fewer samples); None: dropped whole
    removed: list[ScoredSample] = field(default_factory=list)  # taken out of a kept group
    pass_rate_dropped: bool = False  # the whole group, its pass rate out of bounds
    void_group_dropped: bool = False  # the whole group, too little left without void samples
    void_dropped: int = 0  # samples with a void turn
    roc_dropped: int = 0  # samples resample-on-correct left out


def filter_group(group: ScoredGroup, config: FilterConfig, keep: int,
                 rng: random.Random) -> GroupVerdict:
    """Pass rate, then void turns, then resample-on-correct down to ``keep`` samples."""
    samples = group.samples
    if config.pass_rate_filter and not pass_rate_inside(
            pass_rate([s.correct for s in samples]), config.pass_rate_low,
            config.pass_rate_high):
        return GroupVerdict(None, pass_rate_dropped=True)
    verdict = GroupVerdict(group)
    if config.drop_void_turns:
        void = [has_void_turn(s.trajectory) for s in samples]
        verdict.void_dropped = sum(void)
        kept = void_survivors(void, [s.reward for s in samples])
        if kept is None:
            return GroupVerdict(None, void_group_dropped=True, void_dropped=sum(void))
        verdict.removed += [s for s, v in zip(samples, void, strict=True) if v]
        samples = [samples[i] for i in kept]
    if config.resample_on_correct and len(samples) > keep:
        chosen = set(resample_on_correct([s.correct for s in samples],
                                         [roc_penalty(s.trajectory) for s in samples],
                                         keep, rng))
        verdict.removed += [s for i, s in enumerate(samples) if i not in chosen]
        verdict.roc_dropped = len(samples) - len(chosen)
        samples = [s for i, s in enumerate(samples) if i in chosen]
    if len(samples) != len(group.samples):
        verdict.group = ScoredGroup(group.group, samples)
    return verdict
