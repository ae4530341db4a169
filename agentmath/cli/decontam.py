"""``agentmath decontam`` and ``agentmath dedup``: drop benchmark contamination and
near-duplicates with N-gram, MinHash and embedding detectors (:mod:`agentmath.synth.decontam`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    SET_OPTION,
    build_config,
    config_option,
    err_console,
    out_console,
    print_json,
    usage_error,
)
from agentmath.cli._options import GENERATED, config_options

if TYPE_CHECKING:
    from agentmath.synth.config import DecontamConfig
    from agentmath.synth.decontam import DecontamReport

INPUT_ARGUMENT = typer.Argument(..., metavar="INPUT", help="JSONL, JSON or Parquet rows.")
OUT_OPTION = typer.Option(None, "--out", "-o", metavar="FILE", help=(
    "Write the kept rows here, unchanged and in input order (JSONL; a JSON list for .json); "
    "written atomically."))
SHOW_OPTION = typer.Option(10, "--show", metavar="N", help="Removals listed in the table.")
#: The settings both commands take as options (dedup has no --against, so no --data-dir).
DEDUP_FIELDS = ("detectors", "ngram_n", "ngram_threshold", "minhash_threshold", "minhash_perm",
                "minhash_shingle", "semantic_threshold", "semantic_numbers", "semantic_model",
                "semantic_device", "semantic_backend", "problem_field", "id_field",
                "answer_field", "ignore_answers")
NAMES = {"semantic_device": "--device", "semantic_model": "--semantic-model"}
SETTINGS = "agentmath.synth.config:DecontamConfig"
METAVARS = {"detectors": "NAMES", "semantic_model": "DIR", "semantic_device": "DEVICE"}


def _config(command: str, config_file: Path | None, sets: list[str] | None,
            settings: dict[str, Any]) -> DecontamConfig:
    """The run's settings: the config file, --set, then the options given."""
    from agentmath.synth.config import DecontamConfig

    return build_config(DecontamConfig, command, config_file, sets, settings,
                        section="decontam")


def _run(command: str, input_path: Path, against: str | None, out: Path | None,
         config: DecontamConfig, quiet: bool) -> DecontamReport:
    """Read, run the detector cascade, write; every expected failure exits with a message."""
    from agentmath.errors import AgentMathError, MissingExtraError
    from agentmath.synth import decontam
    from agentmath.synth import rows as row_io

    def progress(name: str, rows: int) -> None:
        if not quiet:
            err_console().print(f"[dim]{command}: {name} on {rows} rows[/]", highlight=False)

    try:
        chosen = decontam.make_detectors(config.detectors, config)
        rows = row_io.read_rows(input_path, config.problem_field, config.id_field,
                                answer_field=config.answer_field)
        items = [row.item for row in rows]
        spare = None if config.ignore_answers else decontam.other_question
        if against is None:
            report = decontam.deduplicate(items, chosen, progress, spare)
        else:
            refs = row_io.load_against(against, data_dir=config.data_dir,
                                       problem_field=config.problem_field,
                                       id_field=config.id_field,
                                       answer_field=config.answer_field)
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


CONFIG_OPTION = config_option("DecontamConfig", "decontam")


@config_options(SETTINGS, (*DEDUP_FIELDS, "data_dir"), names=NAMES, metavars=METAVARS)
def decontam(
    input_path: Path = INPUT_ARGUMENT,
    against: str = typer.Option(..., "--against", metavar="NAMES", help=(
        "Comma-separated built-in names (math500, aime24, aime25, hmmt25, gsm8k, amc23) "
        "or JSONL/JSON/Parquet files.")),
    out: Path = OUT_OPTION,
    settings: dict[str, Any] = GENERATED,
    show: int = SHOW_OPTION,
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Remove the rows that copy, reformat, reword or renumber a benchmark problem; each
    removal names the detector, its score and the matched benchmark item. A row telling a
    benchmark problem's story but asking another question (its answer differs) is kept."""
    config = _config("decontam", config_file, sets, settings)
    report = _run("decontam", input_path, against, out, config, json_out)
    _finish("decontam", f"{input_path} vs {against}", report, out, json_out, show)


@config_options(SETTINGS, DEDUP_FIELDS, names=NAMES, metavars=METAVARS)
def dedup(
    input_path: Path = INPUT_ARGUMENT,
    out: Path = OUT_OPTION,
    settings: dict[str, Any] = GENERATED,
    show: int = SHOW_OPTION,
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Remove near-duplicates within one dataset: the first row of each cluster stays, and
    each removal names the detector, its score and the id of the kept row it duplicates."""
    config = _config("dedup", config_file, sets, settings)
    report = _run("dedup", input_path, None, out, config, json_out)
    _finish("dedup", str(input_path), report, out, json_out, show)
