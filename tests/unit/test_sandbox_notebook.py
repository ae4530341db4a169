"""Setting aside notebook command lines (agentmath/sandbox/notebook.py), without a sandbox."""

from __future__ import annotations

import ast

import pytest

from agentmath.sandbox.notebook import (
    ipython_stand_ins,
    parse_cell,
    set_aside_commands,
    skipped_note,
)


def test_command_lines_become_pass_at_their_indentation() -> None:
    code = "!pip install x\nif True:\n    %time y = 1\n    z = 2"
    python, skipped = set_aside_commands(code)
    assert python == "pass\nif True:\n    pass\n    z = 2"
    assert skipped == ["!pip install x", "%time y = 1"]


def test_parse_cell_changes_only_cells_that_do_not_parse() -> None:
    tree, skipped = parse_cell("a = 7\n% 3", "<cell-1>")  # a continuation? no: a SyntaxError
    assert skipped == ["% 3"] and isinstance(tree.body[-1], ast.Pass)
    tree, skipped = parse_cell("a = (7\n% 3)", "<cell-1>")
    assert skipped == [] and ast.unparse(tree) == "a = 7 % 3"
    with pytest.raises(SyntaxError) as info:
        parse_cell("%time\nprint(1 +)", "<cell-1>")
    assert info.value.lineno == 2
    with pytest.raises(SyntaxError) as info:
        parse_cell("print(1 +)", "<cell-1>")
    assert info.value.lineno == 1


def test_the_note_names_what_was_skipped_and_stays_short() -> None:
    note = skipped_note([f"!cmd {i} " + "x" * 100 for i in range(5)])
    assert note.startswith("[sandbox] skipped 5 notebook command line(s): !cmd 0 ")
    assert "and 2 more" in note and len(note) < 400 and note.endswith("ran)\n")


def test_ipython_stand_ins_print_their_source_text() -> None:
    modules = ipython_stand_ins()
    display_module = modules["IPython.display"]
    assert modules["IPython"].display is display_module  # type: ignore[attr-defined]
    assert repr(display_module.Math("$x^2$")) == "$x^2$" == repr(display_module.Math("x^2"))
    assert repr(display_module.Markdown("**a**")) == "**a**"
    assert repr(display_module.Latex()) == ""
    assert "display" in display_module.__all__ and ipython_stand_ins()["IPython"] is not \
        modules["IPython"]  # a new pair per call: one worker's changes stay its own
