"""Hand-written rewordings for ``benchmarks/dedup.py``: how many of the people's rewordings of
benchmark problems each detector removes, and how many genuinely different same-topic problems
it removes by mistake.

The rows (``benchmarks/_dedup_paraphrases.py``): 40 hand paraphrases of math500, gsm8k, aime25,
amc23 and hmmt25 problems (other words, the same numbers), the six heavier hand rewordings of
math500/aime24 problems, and 27 same-topic problems that must be kept: 11 telling the source's
story with another question, 16 of the same kind with other numbers or another object. Each
configuration decontaminates them against every built-in benchmark found locally; a
paraphrase counts as removed only when it is matched to its own source. Every row carries its
reference answer (a paraphrase its source's, a same-topic problem its own, worked out by hand),
as the benchmarks do: the same-story rule spares a match whose answers differ
(:mod:`agentmath.synth.questions`); ``answers=False`` gives the texts-only figures.

Every configuration with the semantic detector embeds the same references (some 2,000 texts);
with the ONNX embedder, whose embedding of a text is a function of that text alone (each text
runs alone), they are embedded once in the process and remembered (:class:`_Remembering`): the
figures are the same, the table is made in a third of the time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def hand_scores(configs: dict[str, str], backend: str = "auto",
                answers: bool = True) -> list[dict[str, Any]]:
    """One row per configuration: paraphrase and heavy-rewording recall, same-topic removals
    by kind; with ``answers`` the rows and benchmarks carry their answers (the same-story rule
    on), without them the texts alone decide."""
    from agentmath.synth.decontam import (
        DetectorSettings,
        decontaminate,
        make_detectors,
        other_question,
    )
    from agentmath.synth.rows import Item
    from agentmath.tasks import BUILTIN, find_builtin, load_tasks
    from benchmarks._dedup_paraphrases import HEAVY, PARAPHRASES, SAME_TOPIC

    refs = [Item(t.id, t.problem, name, t.answer) for name in BUILTIN
            if find_builtin(name) is not None for t in load_tasks(name, allow_hub=False)]
    gold = {r.id: r.answer for r in refs}
    rows = [(Item(f"para-{n}", v.text, "", gold.get(v.source)), "para", v.source)
            for n, v in enumerate(PARAPHRASES)]
    rows += [(Item(f"heavy-{n}", t, "", gold.get(s)), "heavy", s)
             for n, (s, t) in enumerate(HEAVY.items())]
    rows += [(Item(f"{v.kind}-{n}", v.text, "", v.answer), v.kind, v.source)
             for n, v in enumerate(SAME_TOPIC)]
    rows = [r for r in rows if r[2] in gold]  # sources whose benchmark is here
    out = []
    for label, config in configs.items():
        detectors = make_detectors(config, DetectorSettings(semantic_backend=backend))
        _remember_embeddings(detectors)
        report = decontaminate([r[0] for r in rows], refs, detectors,
                               spare=other_question if answers else None)
        removed = {r.index: r for r in report.removed}
        count = {k: sum(1 for _, kind, _ in rows if kind == k)
                 for k in ("para", "heavy", "question", "problem")}
        hit = {k: sum(1 for i, (_, kind, source) in enumerate(rows) if kind == k
                      and i in removed and removed[i].matched == source) for k in count}
        wrong = {k: sum(1 for i, (_, kind, _) in enumerate(rows) if kind == k and i in removed)
                 for k in ("question", "problem")}
        out.append({"config": label, "answers": answers, "paraphrases": count["para"],
                    "paraphrase_recall": hit["para"] / max(1, count["para"]),
                    "heavy": count["heavy"], "heavy_removed": hit["heavy"],
                    "other_question": count["question"],
                    "other_question_removed": wrong["question"],
                    "other_problem": count["problem"],
                    "other_problem_removed": wrong["problem"]})
    return out


class _Remembering:
    """An ONNX embedder that embeds each text once in this process (:data:`_SEEN`)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, texts: Any, batch_size: int = 32, threads: int | None = None) -> Any:
        todo = [t for t in dict.fromkeys(texts) if t not in _SEEN]
        if todo:
            _SEEN.update(zip(todo, self.model.encode(todo, batch_size, threads), strict=True))
        return np.stack([_SEEN[t] for t in texts]) if texts else self.model.encode(texts)


_SEEN: dict[str, Any] = {}


def _remember_embeddings(detectors: list[Any]) -> None:
    """Give each semantic detector on the ONNX embedder the remembering one."""
    from agentmath.synth.detectors import SemanticDetector
    from agentmath.synth.embedder import OnnxEmbedder

    for detector in detectors:
        if isinstance(detector, SemanticDetector) and isinstance(detector._embedder(),
                                                                 OnnxEmbedder):
            detector._model = _Remembering(detector._model)


def print_hand(rows: list[dict[str, Any]]) -> None:
    """The hand-rewording table."""
    from _common import print_table

    if not rows:
        return
    first = rows[0]
    print_table(f"hand-written rewordings vs the built-in benchmarks ({first['paraphrases']} "
                f"paraphrases, {first['heavy']} heavy rewordings; {first['other_question']} "
                f"same story + other question, {first['other_problem']} other problems, to "
                f"keep)", ("configuration", "paraphrases removed", "heavy removed",
                          "other question removed", "other problem removed"),
                [(r["config"], f"{r['paraphrase_recall']:.1%}",
                  f"{r['heavy_removed']}/{r['heavy']}",
                  f"{r['other_question_removed']}/{r['other_question']}",
                  f"{r['other_problem_removed']}/{r['other_problem']}") for r in rows])
