"""``agentmath decontam`` and ``agentmath dedup``: drop benchmark contamination and
near-duplicates with N-gram, MinHash and embedding detectors (:mod:`agentmath.synth.decontam`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from agentmath.cli._common import JSON_OPTION, err_console, out_console, print_json, usage_error

if TYPE_CHECKING:
    from agentmath.synth.decontam import DecontamReport, DetectorSettings

INPUT_ARGUMENT = typer.Argument(..., metavar="INPUT", help="JSONL, JSON or Parquet rows.")
OUT_OPTION = typer.Option(None, "--out", "-o", help=(
    "Write the kept rows here, unchanged and in input order (JSONL; a JSON list for .json); "
    "written atomically."))
DETECTORS_OPTION = typer.Option("ngram,minhash,semantic", "--detectors", help=(
    "Comma-separated: ngram, minhash, semantic; they run in that order, each on what the "
    "previous kept."))
NGRAM_N = typer.Option(13, "--ngram-n", help="Words per N-gram.")
NGRAM_THRESHOLD = typer.Option(0.5, "--ngram-threshold", help=(
    "Shared N-grams / N-grams of the shorter text, at or above which texts match."))
MINHASH_THRESHOLD = typer.Option(0.5, "--minhash-threshold", help=(
    "Estimated Jaccard similarity of the shingle sets at or above which texts match."))
MINHASH_PERM = typer.Option(128, "--minhash-perm", help="MinHash permutations.")
MINHASH_SHINGLE = typer.Option(2, "--minhash-shingle", help="Words per shingle.")
SEMANTIC_THRESHOLD = typer.Option(0.85, "--semantic-threshold", help=(
    "Cosine similarity of the MiniLM embeddings at or above which texts match."))
SEMANTIC_NUMBERS = typer.Option(0.5, "--semantic-numbers", help=(
    "Share of numbers a semantic match must keep (multiset Jaccard; 0 turns it off)."))
SEMANTIC_MODEL = typer.Option(None, "--semantic-model", help=(
    "Local sentence-transformers model directory (default: the bundled all-MiniLM-L6-v2)."))
DEVICE_OPTION = typer.Option("auto", "--device", help="Embedding device: auto, cpu, cuda.")
BACKEND_OPTION = typer.Option("auto", "--semantic-backend", help=(
    "Embedding runtime: onnx (int8 ONNX Runtime, CPU), torch, or auto (onnx on a CPU when "
    "onnxruntime is installed)."))
PROBLEM_FIELD = typer.Option("problem", "--problem-field", help=(
    "Field holding the text: a string, or chat messages whose user turns are the text "
    "(`--problem-field messages`, as in SFT records)."))
ID_FIELD = typer.Option("id", "--id-field", help="Field holding the id (default: row index).")
ANSWER_FIELD = typer.Option("answer", "--answer-field", help=(
    "Field holding a row's reference answer (optional per row). A match between two rows "
    "with answers is spared when the answers differ and the texts differ in more than their "
    "numbers: the same story asking another question."))
IGNORE_ANSWERS = typer.Option(False, "--ignore-answers", help=(
    "Match on the texts alone: no match is spared for asking another question."))
SHOW_OPTION = typer.Option(10, "--show", help="Removals listed in the table.")


def _settings(ngram_n: int, ngram_threshold: float, minhash_threshold: float,
              minhash_perm: int, minhash_shingle: int, semantic_threshold: float,
              semantic_numbers: float, semantic_model: str | None,
              device: str, backend: str = "auto") -> DetectorSettings:
    from agentmath.synth.decontam import DetectorSettings

    return DetectorSettings(ngram_n, ngram_threshold, minhash_threshold, minhash_perm,
                            minhash_shingle, semantic_threshold, semantic_numbers,
                            semantic_model, device, semantic_backend=backend)


def _run(command: str, input_path: Path, against: str | None, out: Path | None,
         detectors: str, settings: DetectorSettings, fields: tuple[str, str, str],
         data_dir: str | None, quiet: bool, ignore_answers: bool) -> DecontamReport:
    """Read, run the detector cascade, write; every expected failure exits with a message."""
    from agentmath.errors import AgentMathError, MissingExtraError
    from agentmath.synth import decontam
    from agentmath.synth import rows as row_io

    def progress(name: str, rows: int) -> None:
        if not quiet:
            err_console().print(f"[dim]{command}: {name} on {rows} rows[/]", highlight=False)

    try:
        chosen = decontam.make_detectors(detectors, settings)
        rows = row_io.read_rows(input_path, *fields[:2], answer_field=fields[2])
        items = [row.item for row in rows]
        spare = None if ignore_answers else decontam.other_question
        if against is None:
            report = decontam.deduplicate(items, chosen, progress, spare)
        else:
            refs = row_io.load_against(against, data_dir=data_dir, problem_field=fields[0],
                                       id_field=fields[1], answer_field=fields[2])
            report = decontam.decontaminate(items, refs, chosen, progress, spare)
        if out is not None:
            row_io.write_rows(out, (rows[i] for i in report.kept))
    except MissingExtraError as exc:
        usage_error(f"the semantic detector needs the training extra: {exc} "
                    "(or leave it out: --detectors ngram,minhash)")
    except (AgentMathError, ValueError) as exc:
        usage_error(str(exc))
    except OSError as exc:
        usage_error(f"{type(exc).__name__}: {exc}", code=1)
    return report


def _print(title: str, report: DecontamReport, out: Path | None, show: int) -> None:
    from rich.table import Table

    console = out_console()
    table = Table(title=title)
    for column in ("detector", "threshold", "checked", "removed", "seconds"):
        table.add_column(column, justify="left" if column == "detector" else "right")
    for stage in report.stages:
        table.add_row(stage.detector, f"{stage.threshold:g}", str(stage.checked),
                      str(stage.removed), f"{stage.seconds:.2f}")
    console.print(table)
    if report.removed and show > 0:
        listed = Table(title=f"first {min(show, len(report.removed))} of "
                             f"{len(report.removed)} removals")
        for column in ("id", "detector", "score", "matched"):
            listed.add_column(column)
        for r in report.removed[:show]:
            listed.add_row(r.id, r.detector, f"{r.score:.3f}", f"{r.source}: {r.matched}")
        console.print(listed)
    if report.spared:
        console.print(f"{len(report.spared)} kept row(s) matched only problems asking another "
                      "question (other answers; listed in --json as 'spared')", highlight=False)
    console.print(f"kept {len(report.kept)} of {report.total} rows"
                  + (f"; wrote {out}" if out is not None else ""), highlight=False)


def _finish(command: str, target: str, report: DecontamReport, out: Path | None,
            json_out: bool, show: int) -> None:
    if json_out:
        data: dict[str, Any] = report.to_json()
        data["out"] = str(out) if out is not None else None
        print_json(data)
    else:
        _print(f"{command}: {target}", report, out, show)


def decontam(
    input_path: Path = INPUT_ARGUMENT,
    against: str = typer.Option(..., "--against", help=(
        "Comma-separated built-in names (math500, aime24, aime25, hmmt25, gsm8k, amc23) "
        "or JSONL/JSON/Parquet files.")),
    out: Path = OUT_OPTION,
    detectors: str = DETECTORS_OPTION,
    ngram_n: int = NGRAM_N,
    ngram_threshold: float = NGRAM_THRESHOLD,
    minhash_threshold: float = MINHASH_THRESHOLD,
    minhash_perm: int = MINHASH_PERM,
    minhash_shingle: int = MINHASH_SHINGLE,
    semantic_threshold: float = SEMANTIC_THRESHOLD,
    semantic_numbers: float = SEMANTIC_NUMBERS,
    semantic_model: str = SEMANTIC_MODEL,
    device: str = DEVICE_OPTION,
    semantic_backend: str = BACKEND_OPTION,
    problem_field: str = PROBLEM_FIELD,
    id_field: str = ID_FIELD,
    answer_field: str = ANSWER_FIELD,
    ignore_answers: bool = IGNORE_ANSWERS,
    data_dir: str = typer.Option(None, "--data-dir", help="Where built-in datasets live."),
    show: int = SHOW_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Remove the rows that copy, reformat, reword or renumber a benchmark problem; each
    removal names the detector, its score and the matched benchmark item. A row telling a
    benchmark problem's story but asking another question (its answer differs) is kept."""
    settings = _settings(ngram_n, ngram_threshold, minhash_threshold, minhash_perm,
                         minhash_shingle, semantic_threshold, semantic_numbers,
                         semantic_model, device, semantic_backend)
    report = _run("decontam", input_path, against, out, detectors, settings,
                  (problem_field, id_field, answer_field), data_dir, json_out, ignore_answers)
    _finish("decontam", f"{input_path} vs {against}", report, out, json_out, show)


def dedup(
    input_path: Path = INPUT_ARGUMENT,
    out: Path = OUT_OPTION,
    detectors: str = DETECTORS_OPTION,
    ngram_n: int = NGRAM_N,
    ngram_threshold: float = NGRAM_THRESHOLD,
    minhash_threshold: float = MINHASH_THRESHOLD,
    minhash_perm: int = MINHASH_PERM,
    minhash_shingle: int = MINHASH_SHINGLE,
    semantic_threshold: float = SEMANTIC_THRESHOLD,
    semantic_numbers: float = SEMANTIC_NUMBERS,
    semantic_model: str = SEMANTIC_MODEL,
    device: str = DEVICE_OPTION,
    semantic_backend: str = BACKEND_OPTION,
    problem_field: str = PROBLEM_FIELD,
    id_field: str = ID_FIELD,
    answer_field: str = ANSWER_FIELD,
    ignore_answers: bool = IGNORE_ANSWERS,
    show: int = SHOW_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Remove near-duplicates within one dataset: the first row of each cluster stays, and
    each removal names the detector, its score and the id of the kept row it duplicates."""
    settings = _settings(ngram_n, ngram_threshold, minhash_threshold, minhash_perm,
                         minhash_shingle, semantic_threshold, semantic_numbers,
                         semantic_model, device, semantic_backend)
    report = _run("dedup", input_path, None, out, detectors, settings,
                  (problem_field, id_field, answer_field), None, json_out, ignore_answers)
    _finish("dedup", str(input_path), report, out, json_out, show)
