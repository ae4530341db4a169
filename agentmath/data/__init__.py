"""Synthetic training data: generated word problems and code injection into tool trajectories.

:mod:`agentmath.data.synthetic` makes seeded multi-step arithmetic problems with a text
chain-of-thought; :mod:`agentmath.data.convert` turns each into a sandbox-verified trajectory
(``inject``) in the JSONL record format the SFT module reads.
"""

from agentmath.data.convert import (
    DROP_REASONS,
    ConversionError,
    ConversionReport,
    Converter,
    Piece,
    RuleBasedConverter,
    convert_one,
    inject,
    read_jsonl,
    text_only_example,
    write_jsonl,
)
from agentmath.data.synthetic import (
    Step,
    SyntheticProblem,
    generate_problems,
    split,
    to_task_rows,
)

__all__ = ["DROP_REASONS", "ConversionError", "ConversionReport", "Converter", "Piece",
           "RuleBasedConverter", "Step", "SyntheticProblem", "convert_one", "generate_problems",
           "inject", "read_jsonl", "split", "text_only_example", "to_task_rows", "write_jsonl"]
