"""Seeds derived from a run seed and the identity of what they seed, the same in any process.

Every seed agentmath draws per item (an evaluation sample, an RL sample, an epoch's order, a
filter's choice) comes from :func:`derive_seed`: a SHA-256 of the parts joined by a separator,
cut to ``bits`` bits. Python's ``hash()`` is salted per process, and a seed that depended on
scheduling order would change a resumed or distributed run; this one depends only on the parts.

The two callers hashed differently before they shared this function, and their seeds are
results (the demo's figures follow from them), so each keeps its own scheme: the RL run's 63-bit
seeds of ``":"``-joined parts (:data:`RL`), and evaluation's 32-bit seeds of NUL-joined parts
(:data:`EVAL`, via :func:`eval_sample_seed`). A new caller uses the default (:data:`RL`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Scheme:
    """How parts become a seed: the separator they are joined with and the seed's width."""

    sep: str
    bits: int


RL = Scheme(sep=":", bits=63)  # rl.rollouts since its first version
EVAL = Scheme(sep="\0", bits=32)  # eval.runner's per-sample seed since its first version


def derive_seed(*parts: object, scheme: Scheme = RL) -> int:
    """A stable seed of ``scheme.bits`` bits from ``parts`` (each turned into ``str``)."""
    if not 1 <= scheme.bits <= 64:
        raise ValueError(f"a seed has 1 to 64 bits, got {scheme.bits}")
    digest = hashlib.sha256(scheme.sep.join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - scheme.bits)


def eval_sample_seed(seed: int, problem_id: str, index: int) -> int:
    """An evaluation sample's seed from the run seed, problem id and sample index (so neither
    scheduling order nor placement changes a sample)."""
    return derive_seed(seed, problem_id, index, scheme=EVAL)
