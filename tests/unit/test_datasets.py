"""Tests of dataset loading: built-ins, search order, custom files, strict validation, CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.errors import DataError
from agentmath.tasks import BUILTIN, Task, data_dirs, find_builtin, load_tasks
from agentmath.tasks import datasets as ds
from agentmath.tasks.files import FileRow

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
COUNTS = {"math500": 500, "aime24": 30, "aime25": 30, "hmmt25": 30, "gsm8k": 1319, "amc23": 40}
needs_shared = pytest.mark.skipif(not (SHARED / "math500.jsonl").is_file(),
                                  reason=f"shared benchmark data not found in {SHARED}")


def _jsonl(path: Path, rows: list[Any]) -> Path:
    """Write ``rows`` as JSONL (strings are written verbatim, for malformed lines)."""
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _error(path: Path, **kwargs: Any) -> str:
    """The DataError message of loading ``path``."""
    with pytest.raises(DataError) as info:
        load_tasks(str(path), **kwargs)
    return str(info.value)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests do not see the developer's $AGENTMATH_DATA_DIR."""
    monkeypatch.delenv(ds.DATA_DIR_ENV, raising=False)


# --- built-ins from /work/shared/data ---------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("name", sorted(COUNTS))
def test_builtin_loads_with_exact_count(name: str) -> None:
    tasks = load_tasks(name, data_dir=SHARED, allow_hub=False)
    assert len(tasks) == COUNTS[name]
    assert len({t.id for t in tasks}) == len(tasks)
    assert all(isinstance(t, Task) and t.problem.strip() and t.answer.strip() for t in tasks)
    assert all("id" not in t.meta and "problem" not in t.meta for t in tasks)


@needs_shared
def test_math500_levels_and_subjects() -> None:
    tasks = load_tasks("math500", data_dir=SHARED, allow_hub=False)
    assert {t.meta["level"] for t in tasks} == {1, 2, 3, 4, 5}
    assert all(type(t.meta["level"]) is int and t.meta["subject"] for t in tasks)
    assert tasks[0].id == "test/precalculus/807.json" and tasks[0].meta["solution"]


@needs_shared
def test_aime_answers_kept_as_in_source() -> None:
    tasks = {t.id: t for t in load_tasks("aime24", data_dir=SHARED, allow_hub=False)}
    assert tasks["aime2024-I-1"].answer == "204"
    padded = [t for t in tasks.values() if t.answer.startswith("0")]
    assert padded and "025" in {t.answer for t in padded}
    assert all(int(t.answer) == t.meta["answer_int"] for t in padded)
    assert tasks["aime2024-I-1"].meta["year"] == 2024


@needs_shared
def test_amc23_and_hmmt25_answers() -> None:
    amc = load_tasks("amc23", data_dir=SHARED, allow_hub=False)
    assert all(not t.answer.endswith(".0") for t in amc)
    assert all(t.answer == str(int(t.meta["source_answer"])) for t in amc)
    hmmt = {t.id: t for t in load_tasks("hmmt25", data_dir=SHARED, allow_hub=False)}
    assert hmmt["hmmt-feb-2025-10"].answer.count("sqrt{17}") == 2


@needs_shared
def test_limit_keeps_first_rows() -> None:
    tasks = load_tasks("gsm8k", data_dir=SHARED, limit=3, allow_hub=False)
    assert [t.id for t in tasks] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"]
    assert tasks[0].answer == "18" and "####" in tasks[0].meta["solution"]
    assert load_tasks("gsm8k", data_dir=SHARED, limit=0, allow_hub=False) == []
    with pytest.raises(ValueError):
        load_tasks("gsm8k", data_dir=SHARED, limit=-1)


# --- search order -------------------------------------------------------------------------


def test_data_dirs_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit, env = tmp_path / "explicit", tmp_path / "env"
    monkeypatch.setenv(ds.DATA_DIR_ENV, str(env))
    monkeypatch.chdir(tmp_path)
    dirs = data_dirs(explicit)
    assert dirs[:2] == [explicit.resolve(), env.resolve()]
    assert dirs[2] == (Path(ds.__file__).resolve().parents[2].parent / "shared" / "data")
    assert dirs[3] == (tmp_path / "data").resolve() and len(dirs) == 4
    assert data_dirs(env) == dirs[1:]  # duplicates are listed once


@needs_shared
def test_find_builtin_prefers_explicit_then_env(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    explicit, env = tmp_path / "explicit", tmp_path / "env"
    for directory, answer in ((explicit, "explicit"), (env, "env")):
        directory.mkdir()
        _jsonl(directory / "aime24.jsonl", [{"id": "x", "problem": "p", "answer": answer}])
    monkeypatch.setenv(ds.DATA_DIR_ENV, str(env))
    assert find_builtin("aime24", explicit) == (explicit / "aime24.jsonl").resolve()
    assert load_tasks("aime24", data_dir=explicit)[0].answer == "explicit"
    assert load_tasks("aime24")[0].answer == "env"
    monkeypatch.delenv(ds.DATA_DIR_ENV)
    assert find_builtin("aime24") == SHARED.resolve() / "aime24.jsonl"  # the default
    with pytest.raises(DataError, match="known: math500"):
        find_builtin("nope")


def test_missing_builtin_without_hub_lists_searched_dirs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ds, "_REPO_ROOT", tmp_path / "repo" / "root")
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty"
    with pytest.raises(DataError) as info:
        load_tasks("math500", data_dir=empty, allow_hub=False)
    message = str(info.value)
    assert "math500.jsonl" in message and "not found" in message
    for directory in data_dirs(empty):
        assert str(directory) in message


def test_hub_fallback_failure_is_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: Any) -> None:
        raise DataError("could not load 'HuggingFaceH4/MATH-500' from the Hugging Face hub")

    monkeypatch.setattr(ds, "_REPO_ROOT", tmp_path / "repo" / "root")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ds, "_hub_rows", fail)
    with pytest.raises(DataError, match="not found in.*hub fallback failed.*MATH-500"):
        load_tasks("math500", data_dir=tmp_path)


def test_hub_builtin_mapping_gsm8k(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rows = [FileRow("row 1", {"question": "2+2?", "answer": "2+2=<<2+2=4>>4\n#### 4"}),
            FileRow("row 2", {"question": "3*3?", "answer": "#### 9"})]
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(ds, "_hub_rows", lambda *args: calls.append(args) or rows)
    monkeypatch.setattr(ds, "_REPO_ROOT", tmp_path / "r" / "r")
    monkeypatch.chdir(tmp_path)
    tasks = load_tasks("gsm8k", data_dir=tmp_path)
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [(t.id, t.problem, t.answer) for t in tasks] == [("0", "2+2?", "4"), ("1", "3*3?", "9")]
    assert tasks[0].meta["solution"].endswith("#### 4")


def test_hub_id_without_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # import fails
    with pytest.raises(DataError, match="some-org/some-set.*datasets"):
        load_tasks("some-org/some-set")
    with pytest.raises(DataError, match="hub loading is disabled"):
        load_tasks("some-org/some-set", allow_hub=False)
    with pytest.raises(DataError, match="unknown dataset"):
        load_tasks("not a dataset")


class _FakeDatasets:
    """Stands in for the ``datasets`` package: ``load_dataset`` returns splits or raises."""

    def __init__(self, splits: dict[str, list[dict[str, Any]]]) -> None:
        self.splits = splits

    def load_dataset(self, hub_id: str, config: str | None, split: str | None) -> Any:
        if hub_id == "org/offline":
            raise ConnectionError("no network")
        return self.splits if split is None else self.splits[split]


def test_hub_id_split_choice_and_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeDatasets({"train": [{"problem": "t", "answer": 1}],
                          "test": [{"problem": "p", "answer": 2.0, "id": 7}]})
    monkeypatch.setitem(__import__("sys").modules, "datasets", fake)
    assert load_tasks("org/set") == [Task("7", "p", "2", {})]  # "test" is the default
    assert load_tasks("org/set", split="train")[0].answer == "1"
    with pytest.raises(DataError, match=r"'org/offline'.*split='test'.*ConnectionError"):
        load_tasks("org/offline", split="test")
    fake.splits = {"a": [], "b": []}
    with pytest.raises(DataError, match="several splits"):
        load_tasks("org/set")
    fake.splits = {"only": [{"problem": "p"}]}
    with pytest.raises(DataError, match=r"hub:org/set: row 1: field 'answer'"):
        load_tasks("org/set")


@needs_shared
def test_builtin_split_other_than_local_goes_to_hub() -> None:
    assert len(load_tasks("aime24", data_dir=SHARED, split="test", allow_hub=False)) == 30
    with pytest.raises(DataError, match="holds only split 'test', not 'train'"):
        load_tasks("gsm8k", data_dir=SHARED, split="train", allow_hub=False)


# --- custom files ---------------------------------------------------------------------------


def test_custom_jsonl_field_mapping(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "mine.jsonl", [
        {"qid": "a", "question": "1+1?", "final": 2, "level": "Level 3"},
        "",  # blank lines are not rows
        {"qid": "b", "question": "half?", "final": 0.5, "level": "4"},
        {"qid": "c", "question": "big?", "final": 27.0, "note": "x"},
    ])
    tasks = load_tasks(str(path), problem_field="question", answer_field="final", id_field="qid")
    assert [(t.id, t.problem, t.answer) for t in tasks] == [
        ("a", "1+1?", "2"), ("b", "half?", "0.5"), ("c", "big?", "27")]
    assert tasks[0].meta == {"level": 3} and tasks[1].meta == {"level": 4}
    assert tasks[2].meta == {"note": "x"}
    assert hash(tasks[0]) == hash(Task("a", "1+1?", "2", {}))


def test_json_list_and_data_wrapper_and_index_ids(tmp_path: Path) -> None:
    rows = [{"problem": "p1", "answer": "025"}, {"problem": "p2", "answer": "x"}]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "wrapped.json").write_text(json.dumps({"data": rows}))
    for name in ("list.json", "wrapped.json"):
        tasks = load_tasks(str(tmp_path / name))
        assert [(t.id, t.answer) for t in tasks] == [("0", "025"), ("1", "x")]
    (tmp_path / "bad.json").write_text(json.dumps({"rows": rows}))
    assert "expected a JSON list" in _error(tmp_path / "bad.json")


def test_missing_file_and_split_on_file(tmp_path: Path) -> None:
    assert "no such file" in _error(tmp_path / "absent.jsonl")
    (tmp_path / "dir.jsonl").mkdir()  # a directory named like its file: said so
    assert _error(tmp_path / "dir.jsonl").endswith("dir.jsonl: a directory, not a file")
    path = _jsonl(tmp_path / "ok.jsonl", [{"id": "a", "problem": "p", "answer": "1"}])
    assert "split" in _error(path, split="train")


# --- malformed rows -----------------------------------------------------------------------


GOOD = {"id": "a", "problem": "p", "answer": "1"}


@pytest.mark.parametrize(("rows", "line", "field", "words"), [
    ([GOOD, {"id": "b", "problem": "q", "answer": "2"}, '{"id": "c", "problem":'],
     3, None, "invalid JSON"),
    ([GOOD, {"id": "b", "problem": "q"}], 2, "answer", "is missing"),
    ([GOOD, {"id": "b", "problem": ["q"], "answer": "2"}], 2, "problem", "got list"),
    ([GOOD, {"id": "b", "problem": "q", "answer": None}], 2, "answer", "got null"),
    ([GOOD, {"id": "b", "problem": "  ", "answer": "2"}], 2, "problem", "is empty"),
    ([GOOD, {"id": "b", "problem": True, "answer": "2"}], 2, "problem", "got bool"),
    ([GOOD, {"id": "b", "problem": "q", "answer": "2"}, GOOD], 3, "id", "duplicate id 'a'"),
    ([GOOD, {"id": 1.5, "problem": "q", "answer": "2"}], 2, "id", "integer"),
    ([GOOD, ["not", "an", "object"]], 2, None, "JSON object"),
    ([GOOD, {"id": "b", "problem": "q", "answer": float("nan")}], 2, "answer", "finite"),
])  # fmt: skip
def test_malformed_row_names_file_line_field(tmp_path: Path, rows: list[Any], line: int,
                                             field: str | None, words: str) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    message = _error(path)
    assert str(path) in message and f"line {line}:" in message and words in message
    if field is not None:
        assert f"field {field!r}" in message


def test_index_id_colliding_with_explicit_id_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "ids.jsonl", [{"id": "1", "problem": "p", "answer": "1"},
                                          {"problem": "q", "answer": "2"}])
    assert "line 2: field 'id': duplicate id '1'" in _error(path)


def test_not_utf8_names_line(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"problem": "caf\xe9"}\n')
    assert "line 2" in _error(path) and "UTF-8" in _error(path)


def test_json_file_bad_row_names_row(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([GOOD, {"id": "b", "answer": "2"}]))
    message = _error(path)
    assert str(path) in message and "row 2" in message and "field 'problem'" in message


def test_parquet_works_or_says_pip_install(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        path.write_bytes(b"PAR1")
        assert "pip install pyarrow" in _error(path)
        return
    pq.write_table(pa.Table.from_pylist([{"q": "p1", "a": 1.0}, {"q": "p2", "a": 2.5}]), path)
    tasks = load_tasks(str(path), problem_field="q", answer_field="a")
    assert [(t.id, t.problem, t.answer) for t in tasks] == [("0", "p1", "1"), ("1", "p2", "2.5")]


# --- CLI --------------------------------------------------------------------------------------


@needs_shared
def test_cli_datasets_json_lists_all_builtins() -> None:
    result = CliRunner().invoke(app, ["datasets", "--json", "--data-dir", str(SHARED)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    records = {r["name"]: r for r in data["datasets"]}
    assert set(records) == set(BUILTIN) == set(COUNTS)
    for name, count in COUNTS.items():
        assert records[name]["rows"] == count and records[name]["source"] == "local"
        assert records[name]["hub_id"] == BUILTIN[name].hub_id
    assert data["data_dirs"][0] == str(SHARED.resolve())


def test_cli_datasets_table_with_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ds, "_REPO_ROOT", tmp_path / "r" / "r")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # rich would wrap paths and hub ids at 80
    data = tmp_path / "d"
    data.mkdir()
    _jsonl(data / "amc23.jsonl", [GOOD, {"id": "b", "problem": "q", "answer": "2"}])
    result = CliRunner().invoke(app, ["datasets", "--data-dir", str(data)])
    assert result.exit_code == 0, result.output
    assert "missing" in result.stdout and "HuggingFaceH4/MATH-500" in result.stdout
    amc_line = next(line for line in result.stdout.splitlines() if "amc23" in line)
    assert " 2 " in amc_line and "amc23.jsonl" in amc_line


# --- faults: end-of-line JSON errors, empty files ---------------------------------------------


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_json_error_at_the_end_of_a_line_names_its_column(tmp_path: Path, ending: str) -> None:
    line = '{"id": "a", "problem": "1+1", "answer": "2"'  # the closing brace is missing
    path = tmp_path / "rows.jsonl"
    path.write_bytes((json.dumps(GOOD) + ending + line + ending).encode())
    column = len(line) + 1  # just past the last character, where the comma or brace belongs
    expected = f"{path}: line 2: invalid JSON: Expecting ',' delimiter (column {column})"
    assert _error(path) == expected


@pytest.mark.parametrize(("name", "content"), [
    ("empty.jsonl", ""), ("blank.jsonl", "\n  \n\n"), ("empty.json", "[]"),
    ("data.json", '{"data": []}'),
])
def test_an_empty_dataset_file_is_refused_by_name(tmp_path: Path, name: str,
                                                  content: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert _error(path) == f"{path}: the dataset is empty (no rows)"
