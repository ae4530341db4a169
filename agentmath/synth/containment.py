"""Short texts found inside longer ones: the N-gram detector's answer to a short benchmark
problem pasted into a longer row.

A text with fewer fingerprint tokens than the N-gram size is a single N-gram
(:class:`~agentmath.synth.detectors.NGramDetector`), so it matched only a row with the same
fingerprint: "What is $\\frac{9}{2}$ expressed as a decimal?" inside a chat template, after a
"Solve the following problem" instruction or above a worked solution went unseen by the
lexical detectors, and the embedding one, diluted by the wrapper, missed it too (measured:
7 of 12 MATH500 problems wrapped in ChatML, the short ones). A fifth of MATH500 is that
short (101 of 500 problems under 13 tokens).

Here a short reference is found when its whole token stream occurs, contiguously, in a
query's. Numbers are compared as written on both sides (:func:`number_tokens`), not masked:
in a short problem the numbers are the problem, and "find # / # express decimal" would be
found in every such question. References under ``min_tokens`` tokens ("simplify sqrt 242")
are left to the exact-fingerprint match: three tokens are found inside too many other
questions. A query that merely contains a short problem while asking another question with
another answer is spared by the decontamination's same-story rule, as for any detector.

Written by hand: a dict from token tuples to references, probed only at the positions whose
token starts some short reference; no library indexes substrings of token streams this way.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentmath.synth.normalize import number_tokens


class ShortTextIndex:
    """Short reference texts, found inside longer query texts by their number-keeping token
    streams. ``index`` takes the references and which of them are short; ``query`` returns,
    per query, the indices of the short references whose token stream it contains."""

    def __init__(self, min_tokens: int = 4) -> None:
        if min_tokens < 1:
            raise ValueError(f"containment: need min_tokens >= 1, got {min_tokens}")
        self.min_tokens = min_tokens
        self._refs: dict[tuple[str, ...], list[int]] = {}
        self._lengths: dict[str, tuple[int, ...]] = {}  # first token -> lengths starting there

    def index(self, texts: Sequence[str], short: Sequence[bool]) -> None:
        self._refs, lengths = {}, {}
        for ref, (text, is_short) in enumerate(zip(texts, short, strict=True)):
            if not is_short:
                continue
            tokens = number_tokens(text)
            if len(tokens) < self.min_tokens:
                continue
            self._refs.setdefault(tokens, []).append(ref)
            lengths.setdefault(tokens[0], set()).add(len(tokens))
        self._lengths = {first: tuple(sorted(ks)) for first, ks in lengths.items()}

    def query(self, texts: Sequence[str], *, earlier_only: bool = False) -> list[list[int]]:
        """Per query, the short references inside it, ascending; with ``earlier_only`` (the
        queries are the indexed texts) only references before the query."""
        found: list[list[int]] = []
        for q, text in enumerate(texts):
            hits: set[int] = set()
            if self._refs:
                tokens = number_tokens(text)
                for i, token in enumerate(tokens):
                    for k in self._lengths.get(token, ()):
                        hits.update(self._refs.get(tokens[i:i + k], ()))
            found.append(sorted(r for r in hits if not earlier_only or r < q))
        return found
