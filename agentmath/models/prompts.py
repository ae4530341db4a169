"""The system prompts a model was trained with, kept beside its weights.

A tool-using model answers well only under the system prompt its training records had: the
demo's tool model scores 100% on its held-out problems under its own prompt and 0% under the
tool format's default one. A Hugging Face model directory has no place for that prompt, so a
user who evaluates a trained model with ``agentmath eval --model DIR`` and no
``--system-prompt`` used to get the format's default and a silent 0%. agentmath's trainers
therefore write ``agentmath_prompts.json`` next to the weights (``{"prompts": {format name:
system prompt}}``) and the commands that run a local model read it when no prompt is given.

One writer (:meth:`TrainedPrompts.write`, called by the tool-model recipe and by the RL
trainer for its final model) and one reader (:meth:`TrainedPrompts.read`); a model without the
file (any model not trained here) reads as None and the format's default applies as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from agentmath.errors import DataError

FILE = "agentmath_prompts.json"


@dataclass(frozen=True)
class TrainedPrompts:
    """The system prompt a model was trained with, per tool format name."""

    prompts: dict[str, str] = field(default_factory=dict)

    def get(self, fmt: str) -> str | None:
        """The prompt for ``fmt``, or None when the model was not trained with one for it."""
        return self.prompts.get(fmt)

    def with_prompt(self, fmt: str, prompt: str) -> TrainedPrompts:
        """A copy in which ``fmt``'s prompt is ``prompt``."""
        return TrainedPrompts({**self.prompts, fmt: prompt})

    def write(self, model_dir: str | Path) -> Path:
        """Write the file into ``model_dir`` (which exists); return its path."""
        path = Path(model_dir) / FILE
        path.write_text(json.dumps({"prompts": self.prompts}, indent=2, ensure_ascii=False)
                        + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, model_dir: str | Path) -> TrainedPrompts | None:
        """The prompts stored in ``model_dir``; None when it is not a local directory or has
        no such file. A file that is not what :meth:`write` writes is a DataError naming it."""
        path = Path(model_dir).expanduser() / FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from exc
        prompts = data.get("prompts") if isinstance(data, dict) else None
        if not isinstance(prompts, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
            raise DataError(f"{path}: field 'prompts': must map format names to prompt strings")
        return cls(dict(prompts))


def trained_prompt(model: str | Path, fmt: str) -> str | None:
    """The system prompt ``model`` (a local directory, or a served name: None) was trained
    with for the tool format ``fmt``; None when it has none stored."""
    stored = TrainedPrompts.read(model)
    return None if stored is None else stored.get(fmt)
