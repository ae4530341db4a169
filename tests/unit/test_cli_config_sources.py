"""Where a command's required settings may come from: the command line or its --config file.

``agentmath eval``'s dataset and model are fields of EvalConfig, so a config file that names
them is enough; a setting given nowhere is an error naming the field, and an error in the
config file's values names the file. Data files that are directories are named as such.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentmath.cli.main import app

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_eval_takes_dataset_and_model_from_the_config_file(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n"
                    + json.dumps({"question": "2+2?", "answer": "4"}) + "\n")
    config = tmp_path / "eval.toml"
    config.write_text(f'dataset = "{data}"\nmodel = "m"\nbase_url = "http://127.0.0.1:9"\n')
    result = runner.invoke(app, ["eval", "-c", str(config), "-o", str(tmp_path / "run"),
                                 "--json"])
    # Past option parsing: the run takes the config's server and model, and its startup
    # check stops at the closed port (exit 1) before the dataset's bad row is read.
    assert result.exit_code == 1, result.output
    assert "cannot reach the model server at http://127.0.0.1:9" in _flat(result.output)
    assert "Traceback" not in result.output and "Missing option" not in result.output


def test_eval_without_a_dataset_anywhere_names_the_field(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "--model", "m", "-o", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "invalid eval settings: dataset: Field required" in _flat(result.output)
    assert not (tmp_path / "run").exists()


def test_a_bad_value_in_the_config_file_names_the_file_and_field(tmp_path: Path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text('dataset = "math500"\nmodel = "m"\nsamples = 0\nbogus = 1\n')
    result = runner.invoke(app, ["eval", "-c", str(config), "-o", str(tmp_path / "run")])
    assert result.exit_code == 2
    text = _flat(result.output)
    assert f"config file {config}" in text
    assert "samples: Input should be greater than or equal to 1" in text
    assert "bogus: Extra inputs are not permitted" in text


def test_dedup_of_a_directory_says_it_is_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dedup", str(tmp_path), "--detectors", "ngram"])
    assert result.exit_code == 2
    assert f"{tmp_path}: a directory, not a file" in _flat(result.output)
