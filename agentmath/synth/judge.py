"""The consistency check: does the reasoning after each real output still follow from it?

A snippet's real output can differ from what the teacher simulated in ways the rule-based
agreement check lets through (a different but equally numeric output, a list in another
order), and the text after it may then rest on the simulated value. AgentMath has a second
model check this; so does this stage (``consistency``, off unless a judge is given).

The judge sees the problem and the trajectory with the real outputs, each block numbered, and
must end its reply with ``VERDICT: CONSISTENT`` or ``VERDICT: INCONSISTENT`` (anything else is
``judge_unclear``, dropped: an unread verdict is not a pass).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentmath.backends.base import Backend, SamplingParams
from agentmath.formats.base import render_body
from agentmath.synth.pieces import Rejected
from agentmath.synth.records import Event
from agentmath.synth.teacher import REQUEST_ERRORS, chat_text
from agentmath.tasks import Task

JUDGE_SYSTEM = (
    "You check tool-integrated math solutions. Each [code k] block was run and [output k] is "
    "its REAL output. Check that the reasoning right after every output agrees with that "
    "output (it uses the values actually printed, not other ones) and that the final answer "
    "follows. Reply with one or two sentences, then a last line that is exactly "
    "'VERDICT: CONSISTENT' or 'VERDICT: INCONSISTENT'."
)
_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(CONSISTENT|INCONSISTENT)\b", re.IGNORECASE)


def judge_view(task: Task, events: Sequence[Event], max_output_chars: int = 2000) -> str:
    """The trajectory as the judge reads it: text, numbered code and real output blocks."""
    parts = [f"Problem:\n{task.problem}\n\nSolution:\n"]
    k = 0
    for event in events:
        if event.result is None:
            parts.append(event.piece.text)
            continue
        k += 1
        parts.append(f"\n[code {k}]\n{event.piece.text}\n[/code {k}]\n[output {k}]\n"
                     f"{render_body(event.result, max_chars=max_output_chars)}\n"
                     f"[/output {k}]\n")
    return "".join(parts)


def parse_verdict(reply: str) -> bool | None:
    """True (consistent), False (inconsistent) or None (no verdict line): the last one."""
    found = _VERDICT.findall(reply)
    return None if not found else found[-1].upper() == "CONSISTENT"


class ConsistencyJudge:
    """Asks a judge model whether a trajectory's reasoning agrees with its real outputs."""

    def __init__(self, backend: Backend, *, max_tokens: int = 512,
                 system: str = JUDGE_SYSTEM) -> None:
        self.backend, self.max_tokens, self.system = backend, max_tokens, system

    async def check(self, task: Task, events: Sequence[Event]) -> None:
        """Raise :class:`Rejected` (stage ``consistency``) unless the judge says consistent."""
        messages = [{"role": "system", "content": self.system},
                    {"role": "user", "content": judge_view(task, events)}]
        try:
            reply, _ = await chat_text(self.backend, messages, max_tokens=self.max_tokens,
                                       sampling=SamplingParams(temperature=0.0, logprobs=False))
        except REQUEST_ERRORS as exc:
            raise Rejected("consistency", "judge_failed",
                           f"{type(exc).__name__}: {str(exc)[:300]}") from exc
        verdict = parse_verdict(reply)
        if verdict is None:
            raise Rejected("consistency", "judge_unclear", f"no verdict in {reply[-200:]!r}")
        if not verdict:
            raise Rejected("consistency", "inconsistent", reply.strip()[-300:])
