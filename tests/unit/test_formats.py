"""Tests of the tool formats: call round trips, finding calls, stop strings, rendering, registry."""

from __future__ import annotations

import json

import pytest

from agentmath.formats import (
    ToolCall,
    ToolFormat,
    available_formats,
    get_format,
    register_format,
    render_body,
)
from agentmath.formats import registry as registry_module
from agentmath.formats.openai_tools import (
    parse_tool_calls,
    tool_message,
    tool_spec,
)
from agentmath.sandbox.result import ExecResult

BUILTINS = ["chatml_tools", "code_interpreter", "markdown", "openai_tools", "tool_call"]
OUTPUT_MARKERS = {"markdown": ("```output", "```"),
                  "tool_call": ("<tool_output>", "</tool_output>"),
                  "code_interpreter": ("<interpreter>", "</interpreter>"),
                  "openai_tools": ("<tool_response>", "</tool_response>"),
                  "chatml_tools": ("<|im_end|>\n<|im_start|>user\n<tool_response>",
                                   "</tool_response><|im_end|>\n<|im_start|>assistant")}
CODES = [
    "print(1 + 1)",
    "x = 1\n\n\ny = x + 1\nprint(y)",
    "s = '```'\nprint(s, \"```python\")",
    'print("</code>", "</tool_call>", "</tool_output>", "</interpreter>")',
    'html = "<code>x</code> <tool_call>"  # tags mid-line',
    "π = 3.14159\nprint('√2 ≈', 2 ** 0.5)  # ünïcödé, 数学",
    "def f(n):\n    if n < 2:\n        return n\n\n    return f(n - 1) + f(n - 2)\n\nf(10)",
    "x = 1\n",
    "\nx = 1",
    "s = 'tab\\there \\\\ back\\\\slash'\nprint(s)",
    'print("""multi\nline""")',
]
REASONING = "We need the 10th Fibonacci number.\nLet me compute it.\n\n"
OK = ExecResult(stdout="42\n")


@pytest.fixture(params=BUILTINS)
def fmt(request: pytest.FixtureRequest) -> ToolFormat:
    return get_format(request.param)


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "_FORMATS", dict(registry_module._FORMATS))


def _cut_at_stop(fmt: ToolFormat, text: str) -> str:
    """What a backend returns when it stops at the first stop string (kept in the output)."""
    hits = [(text.find(s), s) for s in fmt.stop_strings if s in text]
    assert hits, "no stop string in the text"
    index, stop = min(hits)
    return text[:index + len(stop)]


# --- protocol, round trips ---------------------------------------------------------------


def test_builtins_are_registered_and_satisfy_the_protocol(fmt: ToolFormat) -> None:
    assert set(BUILTINS) <= set(available_formats())
    assert isinstance(fmt, ToolFormat)
    assert fmt.stop_strings and all(isinstance(s, str) and s for s in fmt.stop_strings)
    text = fmt.instructions()
    assert 100 < len(text) < 2000
    assert fmt.render_call("")[:5] in text and OUTPUT_MARKERS[fmt.name][0] in text
    assert fmt.find_call(text) is None  # its example call is answered


@pytest.mark.parametrize("code", CODES + [""])
def test_render_call_round_trips(fmt: ToolFormat, code: str) -> None:
    call_text = fmt.render_call(code)
    call = fmt.find_call(call_text)
    assert call == ToolCall(code, 0, len(call_text))
    text = REASONING + call_text
    assert fmt.find_call(text) == ToolCall(code, len(REASONING), len(text))


def test_openai_tools_round_trips_lines_that_are_markers() -> None:
    fmt = get_format("openai_tools")
    code = 'doc = """\n</tool_call>\n```\n</code>\n"""\nprint(doc)'
    assert fmt.find_call(fmt.render_call(code)).code == code
    assert "</tool_call>" not in fmt.render_call(code)[:-len("</tool_call>")]


# --- finding calls -----------------------------------------------------------------------


def test_find_call_picks_the_last_unanswered_call(fmt: ToolFormat) -> None:
    first, second = fmt.render_call("a = 1"), fmt.render_call("b = 2")
    answered = REASONING + first + fmt.render(OK) + "Now the next step.\n"
    text = answered + second
    assert fmt.find_call(text) == ToolCall("b = 2", len(answered), len(text))
    two_open = first + "\nand also\n" + second
    assert fmt.find_call(two_open).code == "b = 2"


def test_answered_call_is_not_found_again(fmt: ToolFormat) -> None:
    text = REASONING + fmt.render_call("a = 1") + fmt.render(OK) + "So the answer is 42."
    assert fmt.find_call(text) is None
    # an output block with a call-like line inside it is not a call either
    inner = ExecResult(stdout=fmt.render_call("evil()") + "\n")
    assert fmt.find_call(fmt.render_call("a = 1") + fmt.render(inner) + "Done.") is None


@pytest.mark.parametrize("text", ["", "The answer is \\boxed{42}.",
                                  "Use code tags like <code> or ```python in prose."])
def test_no_call(fmt: ToolFormat, text: str) -> None:
    assert fmt.find_call(text) is None


def test_unclosed_call_is_not_a_call(fmt: ToolFormat) -> None:
    opening = fmt.render_call("")[:fmt.render_call("").index("\n") + 1]
    if fmt.name == "openai_tools":
        bodies = ['{"name": "python", "arguments": {"code": "for i in ra',
                  '{"name": "python", "arguments": {"code": "print(1)"}}\nThe answer is 1.']
    else:
        bodies = ["for i in range(3):\n", "x = (1 +", "print(1)\nThe answer is 1."]
    assert fmt.find_call(opening) is None
    for body in bodies:
        assert fmt.find_call(REASONING + opening + body) is None, body


@pytest.mark.parametrize("code", [c for c in CODES if c.strip()])
def test_stop_strings_stop_right_after_the_call(fmt: ToolFormat, code: str) -> None:
    call_text = fmt.render_call(code)
    overshoot = fmt.render(ExecResult(stdout="hallucinated\n")) + "The answer is 55.\n"
    cut = _cut_at_stop(fmt, REASONING + call_text + overshoot)
    assert cut.startswith(REASONING + call_text)  # not stopped early, e.g. at the opening
    assert fmt.find_call(cut) == ToolCall(code, len(REASONING), len(REASONING + call_text))


@pytest.mark.parametrize("code", [c for c in CODES if c.strip()])
def test_stripped_stop_string_is_tolerated(fmt: ToolFormat, code: str) -> None:
    text = REASONING + fmt.render_call(code) + "\nmore"
    stop = next(s for s in fmt.stop_strings if s in text)
    stripped = text[:text.index(stop)]
    call = fmt.find_call(stripped)
    assert call is not None and call.code.strip() == code.strip()
    assert (call.start, call.end) == (len(REASONING), len(stripped))


def test_overshoot_after_the_closing_marker(fmt: ToolFormat) -> None:
    call_text = fmt.render_call("print(2)")
    tails = ["\n\nThe result", "\nxyz", "\n" + fmt.render(OK)[:5], "\n" + fmt.render_call("")[:3]]
    if fmt.name != "markdown":  # "```xyz" opens a block in markdown; a tag can end mid-line
        tails.append("xyz")
    for tail in tails:
        text = REASONING + call_text + tail
        assert fmt.find_call(text) == ToolCall("print(2)", len(REASONING),
                                               len(REASONING + call_text))


def test_markdown_specifics() -> None:
    fmt = get_format("markdown")
    assert fmt.find_call("```py\nx = 1\n```").code == "x = 1"
    assert fmt.find_call("```Python\nx = 1\n```\n").code == "x = 1"
    assert fmt.find_call("```text\nx = 1\n```\n```output\n1\n```\n") is None
    # the stop string is the fence alone on its line: not an opening fence
    assert not any(s in "```python\n" for s in fmt.stop_strings)


def test_code_interpreter_strips_agentmath_fences() -> None:
    fmt = get_format("code_interpreter")
    text = "Compute.\n<code>\n```python\nx = 2\nprint(x ** 10)\n```\n</code>\n"
    assert fmt.find_call(text).code == "x = 2\nprint(x ** 10)"
    stripped = "Compute.\n<code>\n```python\nx = 2\nprint(x ** 10)\n```"
    assert fmt.find_call(stripped).code == "x = 2\nprint(x ** 10)"


def test_tag_formats_accept_a_closing_tag_at_line_end() -> None:
    assert get_format("tool_call").find_call("<tool_call>\nx = 1</tool_call>").code == "x = 1"
    assert get_format("code_interpreter").find_call("<code>\nx = 1</code>\n").code == "x = 1"


def test_openai_text_path_malformed_json_gives_an_actionable_error() -> None:
    fmt = get_format("openai_tools")
    call = fmt.find_call('<tool_call>\n{"name": "python", "arguments": {"code": }}\n</tool_call>')
    assert call is not None
    with pytest.raises(SyntaxError, match="not valid JSON"):
        exec(compile(call.code, "<cell>", "exec"), {})  # noqa: S102 - our own snippet
    bash = '{"name": "bash", "arguments": {"code": "ls"}}'
    other = fmt.find_call(f"<tool_call>\n{bash}\n</tool_call>")
    with pytest.raises(SyntaxError, match="unknown tool 'bash'"):
        exec(compile(other.code, "<cell>", "exec"), {})  # noqa: S102
    # raw newlines inside the JSON string (a common model slip) are accepted
    raw = '<tool_call>\n{"name": "python", "arguments": {"code": "x = 1\nx"}}</tool_call>'
    assert fmt.find_call(raw).code == "x = 1\nx"


# --- rendering ---------------------------------------------------------------------------


@pytest.mark.parametrize(("result", "expected"), [
    (ExecResult(stdout="4\n"), "4"),
    (ExecResult(stdout="a\nb\n", value="42"), "a\nb\n42"),
    (ExecResult(value="'x'"), "'x'"),
    (ExecResult(), "(no output)"),
    (ExecResult(stdout="1\n", error="ZeroDivisionError: division by zero (line 3: y = 1/0)",
                error_type="ZeroDivisionError", error_line=3),
     "1\nZeroDivisionError: division by zero (line 3: y = 1/0)"),
])
def test_render_body(result: ExecResult, expected: str) -> None:
    assert render_body(result) == expected


def test_render_timeout_and_crash() -> None:
    bare = render_body(ExecResult(timed_out=True, state_lost=True))
    assert bare.startswith("TimeoutError: execution exceeded the time limit")
    assert "lost" in bare
    pool = ("TimeoutError: the snippet did not finish within 5 s and was stopped; the session "
            "was restarted and earlier variables are lost")
    assert render_body(ExecResult(error=pool, timed_out=True, state_lost=True)) == pool
    crash = render_body(ExecResult(crashed=True, state_lost=True))
    assert crash.startswith("SandboxCrash") and "restarted" in crash
    lost = render_body(ExecResult(stdout="1\n", state_lost=True))
    assert lost.startswith("Note: the session was restarted") and lost.endswith("\n1")


def test_render_truncated_output() -> None:
    sandbox_capped = "head\n... [500 characters omitted] ...\ntail\n"
    assert render_body(ExecResult(stdout=sandbox_capped, truncated=True)) == sandbox_capped[:-1]
    assert "[output truncated]" in render_body(ExecResult(stdout="x\n", truncated=True))


def test_render_caps_huge_output_keeping_head_tail_and_error(fmt: ToolFormat) -> None:
    stdout = "HEAD\n" + "".join(f"{i}\n" for i in range(20_000)) + "TAIL\n"
    error = "ValueError: bad (line 9: f(x))"
    for result in [ExecResult(stdout=stdout), ExecResult(stdout=stdout, error=error)]:
        text = fmt.render(result, max_chars=1000)
        assert len(text) <= 1000
        assert "HEAD" in text and "TAIL" in text and "characters omitted]" in text
        if result.error:
            assert error in text
        assert fmt.render(result, max_chars=1000) == text  # deterministic


def test_render_wraps_in_the_output_markers(fmt: ToolFormat) -> None:
    opening, closing = OUTPUT_MARKERS[fmt.name]
    # a ChatML turn boundary follows the call's closing tag directly (the template's rendering)
    lead = "" if fmt.name == "chatml_tools" else "\n"
    text = fmt.render(ExecResult(stdout="42\n"))
    assert text == f"{lead}{opening}\n42\n{closing}\n"
    assert fmt.render(ExecResult()) == f"{lead}{opening}\n(no output)\n{closing}\n"


# --- registry ----------------------------------------------------------------------------


class _Custom:
    name = "custom"
    stop_strings = ("</run>",)

    def instructions(self) -> str:
        return "Write <run>code</run>."

    def find_call(self, text: str) -> ToolCall | None:
        start = text.rfind("<run>")
        if start < 0:
            return None
        return ToolCall(text[start + 5:].split("</run>")[0], start, len(text))

    def render(self, result: ExecResult, *, max_chars: int = 4000) -> str:
        return f"<out>{render_body(result, max_chars=max_chars)}</out>"

    def render_call(self, code: str) -> str:
        return f"<run>{code}</run>"


def test_unknown_format_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown tool format 'nope'") as info:
        get_format("nope")
    assert all(name in str(info.value) for name in BUILTINS)


def test_register_custom_format(isolated_registry: None) -> None:
    custom = _Custom()
    assert register_format(custom) is custom
    assert get_format("custom") is custom and "custom" in available_formats()
    with pytest.raises(ValueError, match="already registered"):
        register_format(_Custom())
    replacement = _Custom()
    register_format(replacement, replace=True)
    assert get_format("custom") is replacement
    with pytest.raises(ValueError, match="already registered"):
        register_format(get_format("markdown"))


def test_register_rejects_non_formats(isolated_registry: None) -> None:
    bad = _Custom()
    bad.name = ""
    with pytest.raises(TypeError, match="name"):
        register_format(bad)

    class NoRender:
        name, stop_strings = "norender", ("x",)
        instructions = find_call = render_call = _Custom.render_call

    with pytest.raises(TypeError, match="render"):
        register_format(NoRender())  # type: ignore[arg-type]
    assert "norender" not in available_formats()


# --- native OpenAI tool calling ----------------------------------------------------------


def test_tool_spec_is_a_plain_openai_function_tool() -> None:
    spec = tool_spec()
    assert json.loads(json.dumps(spec)) == spec
    assert set(spec) == {"type", "function"} and spec["type"] == "function"
    function = spec["function"]
    assert set(function) == {"name", "description", "parameters"}
    assert function["name"] == "python" and function["description"]
    params = function["parameters"]
    assert set(params) == {"type", "properties", "required"}
    assert params["type"] == "object" and params["required"] == ["code"]
    assert set(params["properties"]) == {"code"}
    assert params["properties"]["code"]["type"] == "string"
    spec["function"]["name"] = "mutated"
    assert tool_spec()["function"]["name"] == "python"  # a fresh copy each time


def test_parse_tool_calls() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function",
         "function": {"name": "python", "arguments": json.dumps({"code": "print('π')"})}},
        {"id": "b", "type": "function",
         "function": {"name": "python", "arguments": '{"code": "x = '}},
        {"id": "c", "type": "function", "function": {"name": "python", "arguments": "{}"}},
        {"id": "d", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
        {"type": "function", "function": {"name": "python", "arguments": {"code": "1"}}},
        "garbage",
    ]}
    calls = parse_tool_calls(message)
    assert [(c.id, c.code) for c in calls] == [("a", "print('π')"), ("b", None), ("c", None),
                                              ("d", None), ("call_4", "1"), ("call_5", None)]
    assert calls[0].error is None and calls[4].error is None
    assert "not valid JSON" in calls[1].error
    assert '"code"' in calls[2].error and "unknown tool 'shell'" in calls[3].error
    assert parse_tool_calls({"role": "assistant", "content": "42"}) == []
    assert parse_tool_calls({"role": "assistant", "tool_calls": None}) == []


def test_tool_message_shape() -> None:
    result = ExecResult(stdout="4\n", value="5")
    message = tool_message("call_1", result)
    assert message == {"role": "tool", "tool_call_id": "call_1", "content": "4\n5"}
    error = tool_message("x", ExecResult(error="bad call", error_type="ToolCallError"))
    assert error["content"] == "bad call"
    assert len(tool_message("y", ExecResult(stdout="z" * 10_000), max_chars=500)["content"]) <= 500
