"""Decontamination and near-duplicate removal without the embedding model: normalisation, the
N-gram and MinHash detectors, planted benchmark contamination, and ``agentmath decontam`` /
``agentmath dedup`` (JSON output, kept rows unchanged, malformed rows, atomic output)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.errors import DataError
from agentmath.synth.decontam import (
    Item,
    decontaminate,
    deduplicate,
    make_detectors,
    parse_detectors,
)
from agentmath.synth.detectors import MinHashDetector, NGramDetector
from agentmath.synth.normalize import (
    canonical_text,
    fingerprint,
    model_text,
    number_agreement,
    numbers,
)
from agentmath.synth.rows import Row, read_rows, write_rows
from agentmath.tasks import load_tasks
from tests.fixtures.contamination import DISTINCT, PLANTED

runner = CliRunner()
LEXICAL = "ngram,minhash"
AYA = load_tasks("aime24")[0].problem


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def _benchmarks() -> dict[tuple[str, str], str]:
    return {(name, t.id): t.problem for name in ("math500", "aime24")
            for t in load_tasks(name)}


def _write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def _invoke(*args: str) -> tuple[int, dict[str, Any] | None, str]:
    result = runner.invoke(app, list(args))
    data = json.loads(result.stdout) if result.exit_code == 0 and "--json" in args else None
    return result.exit_code, data, result.output


# --------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("variant", [
    r"Compute $\frac{1}{2} \cdot 3$.", r"Compute \dfrac12 * 3", r"compute 1/2 \times 3",
    r"Compute $$\left(\tfrac{1}{2}\right)\cdot 3$$", r"Compute \[ \frac{1}{2}\,\cdot\,3 \]",
    "Compute ½ × 3", r"Compute \(\frac 1 2 \ast 3\)",
])
def test_latex_reformattings_have_one_canonical_form(variant: str) -> None:
    assert fingerprint(variant) == fingerprint(r"Compute $\frac{1}{2}\cdot 3$.")
    assert "\\" not in canonical_text(variant) and "$" not in canonical_text(variant)


def test_canonical_text_rewrites_latex_as_plain_text() -> None:
    assert canonical_text(r"Find $\dfrac{x+1}{2}$ when $x \leq 1{,}000$ and $\angle A = "
                          r"30^\circ$, $\text{in cm}$.") == (
        "find x+1 / 2 when x <= 1000 and angle a = 30 degrees , in cm .")
    assert canonical_text(r"$\sqrt{2}\pi$ \% \$5") == "sqrt 2 pi percent 5"
    assert model_text("What is the value of the sum?") == "value sum?"


def test_numbers_are_masked_in_problems_but_kept_in_short_calculations() -> None:
    changed = AYA.replace("$9$", "$12$").replace("4 hours", "5 hours").replace("24", "36")
    assert fingerprint(changed) == fingerprint(AYA)
    assert "#" in fingerprint(AYA) and "9" not in fingerprint(AYA)
    assert fingerprint("What is $513^2 - 487^2$?") != fingerprint("What is $26^2 - 24^2$?")
    assert "513" in fingerprint("What is $513^2 - 487^2$?")


def test_synonyms_stems_and_stopwords_collapse() -> None:
    assert fingerprint("How many positive integers are there?") == fingerprint(
        "Find the number of positive integers.")
    assert fingerprint("Compute the largest value.") == fingerprint(
        "Determine the greatest values")
    assert fingerprint("Two six-sided dice are rolled") == fingerprint(
        "2 six sided dice were thrown")


def test_numbers_and_their_agreement() -> None:
    assert numbers(r"Walk $\frac12$ mile, then seven miles and 2.5 km") == ("1/2", "7", "2.5")
    assert number_agreement(("1", "2", "2"), ("2", "2", "1")) == 1.0
    assert number_agreement(("1", "2"), ("3", "4")) == 0.0
    assert number_agreement((), ()) == 1.0
    assert number_agreement(("7",), ()) == 0.0
    assert number_agreement(("1", "2", "3"), ("1", "2", "4")) == pytest.approx(0.5)


# --------------------------------------------------------------------------- detectors


def test_ngram_scores_are_the_overlap_coefficient() -> None:
    detector = NGramDetector(n=13, threshold=0.5)
    detector.index([AYA, "Find the area of a triangle with sides 13, 14 and 15."])
    inside = f"Solve the following problem carefully. {AYA} Put the answer in a box."
    half = " ".join(AYA.split()[: len(AYA.split()) // 3])
    found = detector.query([AYA, inside, half, DISTINCT[0]])
    assert [m.ref for m in found[0]] == [0] and found[0][0].score == 1.0
    assert found[1][0].ref == 0 and found[1][0].score == 1.0  # pasted inside a longer row
    assert found[2][0].score == 1.0  # a third of the problem: all its N-grams are in AYA
    assert found[3] == []


def test_ngram_short_texts_are_one_gram_and_boilerplate_is_ignored() -> None:
    detector = NGramDetector(n=13, threshold=0.5, max_df=3)
    tail = " Express your answer as a common fraction in simplest form please, thank you."
    refs = [f"{name} rolls two {obj} dice at the {place} table.{tail}" for name, obj, place in (
        ("Ann", "red", "kitchen"), ("Bo", "blue", "garden"), ("Cy", "green", "school"),
        ("Di", "gold", "harbor"))]
    detector.index(refs + ["Compute 2+3."])
    found = detector.query(["Eve rolls five white dice at the ferry." + tail, "Compute 7+8.",
                            "Compute 2+3."])
    assert found[0] == []  # only the shared tail matches, and it is in > max_df references
    assert found[1] == [] and [m.ref for m in found[2]] == [4]


def test_ngram_indexes_copies_once_and_earlier_only_looks_back() -> None:
    texts = [AYA] * 150 + [DISTINCT[0]]
    detector = NGramDetector()
    detector.index(texts)
    found = detector.query(texts, earlier_only=True)
    assert found[0] == [] and found[-1] == []
    assert all(m[0].ref == 0 and m[0].score == 1.0 for m in found[1:150])


def test_minhash_finds_light_edits_with_estimated_jaccard() -> None:
    detector = MinHashDetector(threshold=0.5)
    detector.index([AYA, DISTINCT[3]])
    edited = AYA.replace("Every morning", "Each day").replace("coffee shop afterwards",
                                                                "cafe later")
    found = detector.query([edited, DISTINCT[4], AYA])
    assert found[0][0].ref == 0 and 0.5 <= found[0][0].score < 1.0
    assert found[1] == []
    assert found[2][0].score == 1.0


def test_detector_names_and_parameters_are_checked() -> None:
    assert parse_detectors("semantic, ngram") == ["ngram", "semantic"]
    with pytest.raises(ValueError, match="unknown detector 'bert'.*ngram, minhash, semantic"):
        parse_detectors("ngram,bert")
    with pytest.raises(ValueError, match="no detector"):
        parse_detectors(" , ")
    with pytest.raises(ValueError, match="threshold"):
        NGramDetector(threshold=0)
    assert [d.name for d in make_detectors(LEXICAL)] == ["ngram", "minhash"]


# --------------------------------------------------------------------------- planted


def test_planted_contamination_is_removed_and_distinct_problems_kept() -> None:
    bench = _benchmarks()
    against = [Item(i, t, d) for (d, i), t in bench.items()]
    verbatim = [Item(f"verbatim-{p.source}", bench[(p.dataset, p.source)])
                for p in PLANTED if p.kind == "latex"]
    planted = [Item(f"{p.kind}-{n}", p.text) for n, p in enumerate(PLANTED)]
    distinct = [Item(f"distinct-{n}", t) for n, t in enumerate(DISTINCT)]
    rows = distinct + planted + verbatim
    report = decontaminate(rows, against, make_detectors(LEXICAL))
    removed = {r.id: r for r in report.removed}
    assert not any(i.startswith("distinct") for i in removed)
    assert [rows[i].id for i in report.kept if rows[i].id.startswith("distinct")] == [
        d.id for d in distinct]
    for n, p in enumerate(PLANTED):
        r = removed.get(f"{p.kind}-{n}")
        if p.kind in ("latex", "numbers"):
            assert r is not None and r.detector == "ngram" and r.score >= 0.9, p
            assert (r.source, r.matched) == (p.dataset, p.source)
    reworded = [removed.get(f"reworded-{n}") for n, p in enumerate(PLANTED)
                if p.kind == "reworded"]
    caught = [r for r in reworded if r is not None]
    assert len(caught) >= 5 and all(r.detector == "minhash" for r in caught)
    for item in verbatim:
        assert removed[item.id].detector == "ngram" and removed[item.id].score == 1.0
    assert [s.detector for s in report.stages] == ["ngram", "minhash"]
    assert report.stages[0].checked == len(rows)
    assert report.stages[1].checked == len(rows) - report.stages[0].removed


def test_dedup_keeps_the_first_of_each_cluster() -> None:
    bill = _benchmarks()[("math500", "test/prealgebra/1558.json")]
    latex = next(p.text for p in PLANTED if p.kind == "latex" and p.source.endswith("1558.json"))
    rows = [Item("a", DISTINCT[0]), Item("b", bill), Item("c", DISTINCT[1]),
            Item("d", latex), Item("e", bill), Item("f", DISTINCT[2])]
    report = deduplicate(rows, make_detectors(LEXICAL))
    assert report.kept == [0, 1, 2, 5]
    assert [(r.id, r.matched, r.detector) for r in report.removed] == [
        ("d", "b", "ngram"), ("e", "b", "ngram")]
    assert report.to_json()["kept"] == 4


# --------------------------------------------------------------------------- reading, writing


def test_read_rows_names_file_line_and_field(tmp_path: Path) -> None:
    cases = [
        ('{"id": 1, "problem": "ok"}\n{"id": 2, "problem": "x"\n', "line 2: invalid JSON"),
        ('{"id": 1, "problem": "ok"}\n\n{"id": 3}\n', "line 3: field 'problem': is missing"),
        ('{"id": 1, "problem": 42}\n',
         "line 1: field 'problem': must be a string or a list of chat messages, got int"),
        ('{"id": 1, "messages": []}\n', "line 1: field 'problem': is missing (the row holds "
         "chat messages: --problem-field messages)"),
        ('{"id": 1, "problem": "  "}\n', "line 1: field 'problem': is empty"),
        ('{"id": [1], "problem": "ok"}\n', "line 1: field 'id': must be a non-empty string"),
        ('["problem"]\n', "line 1: row must be a JSON object, got list"),
    ]
    for n, (content, message) in enumerate(cases):
        path = tmp_path / f"bad{n}.jsonl"
        path.write_text(content, encoding="utf-8")
        with pytest.raises(DataError) as info:
            read_rows(path)
        assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


def test_chat_records_are_read_by_their_user_turns(tmp_path: Path) -> None:
    """SFT records (agentmath synth's sft.jsonl, or any chat data) keep the problem in the
    user turn: ``--problem-field messages`` reads it, and the rows are written back as read."""
    bill = _benchmarks()[("math500", "test/prealgebra/1558.json")]

    def record(i: str, problem: str) -> dict[str, Any]:
        return {"id": i, "messages": [{"role": "system", "content": "Use Python."},
                                      {"role": "user", "content": problem},
                                      {"role": "assistant", "content": "\\boxed{1}"}]}

    src = _write_jsonl(tmp_path / "sft.jsonl", [record("copy", bill),
                                                record("own", DISTINCT[0])])
    out = tmp_path / "clean.jsonl"
    code, data, _ = _invoke("decontam", str(src), "--against", "math500", "--detectors",
                            "ngram", "--problem-field", "messages", "--out", str(out), "--json")
    assert code == 0 and data is not None
    assert [r["id"] for r in data["removed"]] == ["copy"] and data["kept"] == 1
    assert out.read_text(encoding="utf-8") == src.read_text(encoding="utf-8").splitlines(
        keepends=True)[1]
    for bad, message in (
            ([{"role": "system", "content": "x"}], "field 'messages': has no user message"),
            ([{"role": "user", "content": "x"}, "hi"], "field 'messages[1]': must be an object "
             "with a role"),
            ([{"role": "user", "content": None}], "field 'messages[0].content': must be a "
             "string in a user message")):
        path = _write_jsonl(tmp_path / "bad.jsonl", [{"id": 1, "messages": bad}])
        with pytest.raises(DataError, match=re.escape(f"line 1: {message}")):
            read_rows(path, problem_field="messages")


def test_read_rows_json_parquet_fields_and_ids(tmp_path: Path) -> None:
    data = [{"qid": "x1", "question": "What is 1+1?"}, {"question": "What is 2+2?"}]
    (tmp_path / "a.json").write_text(json.dumps(data), encoding="utf-8")
    rows = read_rows(tmp_path / "a.json", problem_field="question", id_field="qid")
    assert [(r.item.id, r.item.text, r.where, r.raw) for r in rows] == [
        ("x1", "What is 1+1?", "row 1", None), ("1", "What is 2+2?", "row 2", None)]
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(data), tmp_path / "a.parquet")
    assert [r.item.id for r in read_rows(tmp_path / "a.parquet", "question", "qid")] == [
        "x1", "1"]


def test_write_rows_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("precious\n", encoding="utf-8")

    def rows() -> Any:
        yield Row(Item("1", "a"), "line 1", {"problem": "a"}, '{"problem": "a"}')
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError):
        write_rows(out, rows())
    assert out.read_text(encoding="utf-8") == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    write_rows(out, [Row(Item("1", "a"), "row 1", {"problem": "a", "n": 1})])
    assert out.read_text(encoding="utf-8") == '{"problem": "a", "n": 1}\n'


# --------------------------------------------------------------------------- CLI


def _planted_file(tmp_path: Path) -> tuple[Path, list[str]]:
    bench = _benchmarks()
    lines = [json.dumps({"id": f"d{n}", "problem": t, "answer": "1"}) for n, t in
             enumerate(DISTINCT[:4])]
    problem = json.dumps(bench[("aime24", "aime2024-I-4")])  # odd spacing: copied byte for byte
    lines.append('{"problem": ' + problem + ',  "id": "verbatim", "extra": [1, 2]}')
    lines += [json.dumps({"id": f"p{n}", "problem": p.text}) for n, p in enumerate(PLANTED)
              if p.kind in ("latex", "numbers")][:4]
    lines.append(json.dumps({"id": "d-last", "problem": DISTINCT[-1]}, ensure_ascii=False))
    return _write_jsonl(tmp_path / "in.jsonl", lines), lines


def test_cli_decontam_json_and_unchanged_kept_rows(tmp_path: Path) -> None:
    path, lines = _planted_file(tmp_path)
    out = tmp_path / "clean.jsonl"
    code, data, output = _invoke("decontam", str(path), "--against", "math500,aime24",
                                 "--out", str(out), "--detectors", LEXICAL, "--json")
    assert code == 0, output
    assert data is not None and data["kept"] == 5 and data["total"] == 10
    assert {r["id"] for r in data["removed"]} == {"verbatim", "p0", "p1", "p2", "p3"}
    for r in data["removed"]:
        assert set(r) >= {"id", "detector", "score", "matched"} and r["detector"] == "ngram"
        assert 0.5 <= r["score"] <= 1.0 and r["source"] in ("math500", "aime24")
    assert next(r for r in data["removed"] if r["id"] == "verbatim")["matched"] == (
        "aime2024-I-4")
    kept = [line for line in lines if json.loads(line)["id"].startswith("d")]
    assert out.read_text(encoding="utf-8") == "".join(line + "\n" for line in kept)
    assert [d["detector"] for d in data["detectors"]] == ["ngram", "minhash"]


def test_cli_dedup_json_and_table(tmp_path: Path) -> None:
    rows = [{"id": "a", "problem": AYA}, {"id": "b", "problem": DISTINCT[0]},
            {"id": "c", "problem": AYA.replace("$9$", "$11$")}, {"id": "d", "problem": AYA}]
    path = _write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "dedup.jsonl"
    code, data, output = _invoke("dedup", str(path), "--out", str(out), "--detectors",
                                 "ngram", "--json")
    assert code == 0, output
    assert data is not None and data["kept"] == 2
    assert [(r["id"], r["matched"], r["detector"]) for r in data["removed"]] == [
        ("c", "a", "ngram"), ("d", "a", "ngram")]
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a", "b"]
    code, _, output = _invoke("dedup", str(path), "--detectors", LEXICAL)
    assert code == 0 and "ngram" in output and "kept 2 of 4 rows" in _flat(output)


def test_cli_bad_input_exits_2_naming_file_line_field_and_keeps_output(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"id": 1, "problem": "What is 1+1?"},
                                                 {"id": 2, "question": "no problem field"}])
    out = tmp_path / "out.jsonl"
    out.write_text("earlier result\n", encoding="utf-8")
    for command in (["dedup"], ["decontam", "--against", "aime24"]):
        code, _, output = _invoke(*command, str(path), "--out", str(out), "--json",
                                  "--detectors", "ngram")
        assert code == 2
        assert f"{path}: line 2: field 'problem': is missing" in _flat(output)
        assert "Traceback" not in output
    assert out.read_text(encoding="utf-8") == "earlier result\n"
    code, _, output = _invoke("dedup", str(path), "--detectors", "ngram,bert")
    assert code == 2 and "unknown detector 'bert'" in _flat(output)
    good = _write_jsonl(tmp_path / "good.jsonl", [{"problem": "What is 1+1?"}])
    code, _, output = _invoke("decontam", str(good), "--against", "aime24,nosuch",
                              "--detectors", "ngram")
    assert code == 2 and "'nosuch' is neither a built-in dataset (math500" in _flat(output)


def test_missing_semantic_extra_names_the_extra(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmath.synth import embedder

    embedder._load_model.cache_clear()
    embedder.load.cache_clear()
    for module in ("sentence_transformers", "onnxruntime"):  # neither runtime installed
        monkeypatch.setitem(sys.modules, module, None)
    path = _write_jsonl(tmp_path / "rows.jsonl", [{"problem": "What is 1+1?"},
                                                  {"problem": "What is 2+2?"}])
    code, _, output = _invoke("dedup", str(path), "--detectors", "semantic")
    assert code == 2
    assert "pip install 'agentmath[train]'" in _flat(output) and "Traceback" not in output
    embedder._load_model.cache_clear()
    embedder.load.cache_clear()


def test_importing_decontam_does_not_import_torch() -> None:
    code = ("import sys, agentmath.synth.decontam, agentmath.cli.decontam; print(sorted(m for m "
            "in ('torch', 'sentence_transformers', 'datasketch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_semantic_auto_backend_falls_back_to_torch_when_onnx_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` picks ONNX on a CPU; if building or loading it fails, a warning says so and
    torch serves; ``onnx`` asked for by name raises instead."""
    from agentmath.synth import embedder

    def broken(path: str, threads: int | None = None) -> None:
        raise RuntimeError("export failed")

    monkeypatch.setattr(embedder, "load", broken)
    monkeypatch.setattr(embedder, "_installed", lambda module: True)
    monkeypatch.setattr(embedder, "_cuda_available", lambda: False)
    monkeypatch.setattr(embedder, "_load_model", lambda path, device, dtype: "st-model")
    with pytest.warns(RuntimeWarning, match="ONNX embedder failed .*export failed"):
        chosen = embedder.load_embedder("/models/x", "auto", "auto", "auto")
    assert isinstance(chosen, embedder.TorchEmbedder) and chosen.model == "st-model"
    with pytest.raises(RuntimeError, match="export failed"):
        embedder.load_embedder("/models/x", "auto", "auto", "onnx")
    with pytest.raises(ValueError, match="backend must be auto, onnx or torch"):
        embedder.load_embedder("/models/x", "auto", "auto", "tensorrt")
