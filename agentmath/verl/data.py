"""agentmath tasks as rows of verl's RL dataset (parquet), and the rows' fields back as tasks.

verl's ``RLHFDataset`` reads parquet rows with a chat ``prompt``, a ``data_source``, a
``reward_model.ground_truth`` and an ``extra_info`` mapping; every column reaches the agent
loop's ``run`` as a keyword (``raw_prompt`` is the prompt messages). A row written here names
the ``agentmath`` agent loop (``agent_name``) and carries the problem and answer as agentmath
reads them back (:func:`task_from_fields`). The prompt holds the bare problem: the agent loop
builds the real prompt itself (the tool format's instructions as system prompt, then the
problem), so verl's overlong-prompt filter sees a shorter prompt than the model does.

``python -m agentmath.verl.data --dataset math500 --out data/math500.parquet`` writes one
(any source ``agentmath eval`` takes: a built-in, a JSONL/JSON/Parquet file, a hub id).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentmath.errors import DataError
from agentmath.tasks import Task, load_tasks

AGENT_NAME = "agentmath"


def to_verl_row(task: Task, *, index: int, split: str = "train",
                data_source: str = "agentmath") -> dict[str, Any]:
    """One row of verl's dataset for ``task`` (the layout of verl's own math examples)."""
    return {
        "data_source": data_source,
        "agent_name": AGENT_NAME,
        "prompt": [{"role": "user", "content": task.problem}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": task.answer},
        "extra_info": {"split": split, "index": index, "id": task.id,
                       "problem": task.problem, "answer": task.answer},
    }


def _last_user_message(raw_prompt: Any) -> str | None:
    messages = list(raw_prompt) if raw_prompt is not None else []
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None


def task_from_fields(fields: Mapping[str, Any], problem_key: str = "problem") -> Task:
    """The task a verl sample is about: the problem from ``extra_info[problem_key]`` (else the
    prompt's last user message), the gold from ``reward_model.ground_truth`` (else
    ``extra_info.answer``), the id from ``extra_info.id`` (else the dataset index). A
    DataError says what is missing."""
    extra = fields.get("extra_info") or {}
    reward = fields.get("reward_model") or {}
    problem = extra.get(problem_key)
    if not isinstance(problem, str) or not problem:
        problem = _last_user_message(fields.get("raw_prompt"))
    if not problem:
        raise DataError(f"verl sample has no problem: no extra_info.{problem_key} and no user "
                        "message in raw_prompt")
    answer = reward.get("ground_truth", extra.get("answer"))
    if answer is None:
        raise DataError("verl sample has no gold answer (reward_model.ground_truth)")
    task_id = extra.get("id", fields.get("index", ""))
    return Task(id=str(task_id), problem=problem, answer=str(answer),
                meta={"data_source": fields.get("data_source")})


def write_parquet(tasks: Sequence[Task], path: str | Path, *, split: str = "train",
                  data_source: str = "agentmath") -> int:
    """Write ``tasks`` as verl dataset rows to ``path`` (pandas + pyarrow); the row count."""
    import pandas as pd

    rows = [to_verl_row(task, index=i, split=split, data_source=data_source)
            for i, task in enumerate(tasks)]
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(out, index=False)
    return len(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: an agentmath dataset as a verl parquet file."""
    parser = argparse.ArgumentParser(prog="python -m agentmath.verl.data",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="built-in, file or hub id")
    parser.add_argument("--out", required=True, help="parquet file to write")
    parser.add_argument("--split", default="train", help="extra_info.split of the rows")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--data-source", default="agentmath", help="the rows' data_source")
    args = parser.parse_args(argv)
    try:
        tasks = load_tasks(args.dataset, limit=args.limit)
    except DataError as exc:
        parser.error(str(exc))
    count = write_parquet(tasks, args.out, split=args.split, data_source=args.data_source)
    print(f"wrote {count} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
