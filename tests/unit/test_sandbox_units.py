"""Unit tests of the sandbox's parts that need no worker processes, and of the config loader."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from agentmath.config import DEFAULT_ALLOWED_MODULES, SandboxConfig, apply_overrides, load_config
from agentmath.errors import ConfigError
from agentmath.sandbox.protocol import (
    MAX_FRAME,
    FrameBuffer,
    ProtocolError,
    encode,
    recv_message,
    send_message,
)
from agentmath.sandbox.worker import CappedStream, Executor, make_import_guard

# ----------------------------------------------------------------------------- CappedStream


def test_capped_stream_under_limit_keeps_everything() -> None:
    s = CappedStream(20)
    s.write("hello ")
    s.write("world")
    assert s.getvalue() == "hello world" and not s.truncated and s.total == 11


def test_capped_stream_exactly_at_limit_is_not_truncated() -> None:
    s = CappedStream(10)
    assert s.write("0123456789") == 10
    assert s.getvalue() == "0123456789" and not s.truncated


def test_capped_stream_keeps_head_and_tail_and_counts() -> None:
    s = CappedStream(10)
    text = "".join(chr(ord("a") + i % 26) for i in range(100))
    for ch in text:  # many small writes exercise the compaction path
        s.write(ch)
    assert s.total == 100 and s.truncated
    assert s.getvalue() == f"{text[:5]}\n... [90 characters omitted] ...\n{text[-5:]}"


def test_capped_stream_one_huge_write() -> None:
    s = CappedStream(8)
    assert s.write("H" * 4 + "x" * 10**6 + "T" * 4) == 10**6 + 8
    assert s.getvalue() == "HHHH\n... [1000000 characters omitted] ...\nTTTT"


def test_capped_stream_rejects_bytes() -> None:
    with pytest.raises(TypeError):
        CappedStream(10).write(b"bytes")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- protocol


def test_frame_buffer_reassembles_split_frames() -> None:
    data = encode({"a": 1}) + encode({"b": "é" * 3}) + encode({"c": [1, 2]})
    fb = FrameBuffer()
    out = []
    for i in range(len(data)):  # byte by byte: header and body split everywhere
        out += fb.feed(data[i:i + 1])
    assert out == [{"a": 1}, {"b": "ééé"}, {"c": [1, 2]}]


def test_frame_buffer_many_frames_in_one_chunk_and_partial_tail() -> None:
    frame = encode({"n": 7})
    fb = FrameBuffer()
    assert fb.feed(frame * 3 + frame[:3]) == [{"n": 7}] * 3
    assert fb.feed(frame[3:]) == [{"n": 7}]


def test_frame_buffer_oversize_frame_is_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        FrameBuffer().feed(struct.pack(">I", MAX_FRAME + 1))


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b'"str"', b"42", b"null"])
def test_frame_buffer_non_object_json_is_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="not a JSON object"):
        FrameBuffer().feed(struct.pack(">I", len(body)) + body)


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe{}"])
def test_frame_buffer_undecodable_is_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="undecodable"):
        FrameBuffer().feed(struct.pack(">I", len(body)) + body)


def test_blocking_send_recv_roundtrip_and_eof() -> None:
    a, b = socket.socketpair()
    with a, b:
        send_message(a, {"op": "exec", "code": "x = 'ü'"})
        assert recv_message(b) == {"op": "exec", "code": "x = 'ü'"}
        a.sendall(struct.pack(">I", 10) + b"{}")
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(ProtocolError, match="inside a frame"):
            recv_message(b)
    c, d = socket.socketpair()
    with c, d:
        c.close()
        assert recv_message(d) is None


def test_lone_surrogates_cross_the_boundary() -> None:
    assert FrameBuffer().feed(encode({"s": "a\ud800b"})) == [{"s": "a\ud800b"}]


def test_encode_is_json_not_pickle() -> None:
    frame = encode({"k": "v"})
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4 and json.loads(frame[4:]) == {"k": "v"}


# ----------------------------------------------------------------------------- Executor


@pytest.fixture
def ex() -> Executor:
    return Executor(DEFAULT_ALLOWED_MODULES, max_output_chars=200, max_value_chars=50)


def test_executor_value_and_state(ex: Executor) -> None:
    first = ex.run("x = 40")
    assert not first.get("truncated") and "value" not in first and "error" not in first
    r = ex.run("x + 2")
    assert r["value"] == "42" and "error" not in r
    assert "value" not in ex.run("None")
    assert ex.run("_").get("value") == "42"


def test_executor_captures_stdout_and_stderr() -> None:
    ex = Executor([*DEFAULT_ALLOWED_MODULES, "sys"], max_output_chars=200, max_value_chars=50)
    r = ex.run("import sys\nprint('out')\nprint('err!', file=sys.stderr)")
    assert r["stdout"] == "out\n" and r["stderr"] == "err!\n"
    assert sys.stdout is not None and not isinstance(sys.stdout, CappedStream)  # restored


def test_executor_truncates_output_and_value(ex: Executor) -> None:
    r = ex.run("print('a' * 1000)")
    assert r.get("truncated") and r["stdout"].startswith("a" * 100) and "omitted" in r["stdout"]
    r = ex.run("'b' * 1000")
    assert r.get("truncated") and len(r["value"]) < 50 + 40


def test_executor_error_format_and_line(ex: Executor) -> None:
    r = ex.run("a = 1\nb = [1, 2]\nb[a + 5]")
    assert r["error_type"] == "IndexError"
    assert r["error"] == "IndexError: list index out of range (line 3: b[a + 5])"
    assert r["error_line"] == 3


def test_executor_error_in_earlier_cell_function(ex: Executor) -> None:
    ex.run("def f():\n    return undefined_name")
    r = ex.run("\n\nf()")
    assert r["error"] == ("NameError: name 'undefined_name' is not defined "
                          "(cell 1, line 2: return undefined_name)")
    assert r["error_line"] is None


def test_executor_syntax_error(ex: Executor) -> None:
    r = ex.run("x = 1\nif x\n    pass")
    assert r["error_type"] == "SyntaxError" and r["error_line"] == 2
    assert r["error"].startswith("SyntaxError: ") and "(line 2: if x)" in r["error"]


def test_executor_error_without_message(ex: Executor) -> None:
    r = ex.run("raise KeyError")
    assert r["error"] == "KeyError (line 1: raise KeyError)"


def test_executor_long_error_is_capped(ex: Executor) -> None:
    r = ex.run("raise ValueError('m' * 10000)")
    assert len(r["error"]) < 2100 and "omitted" in r["error"]


def test_executor_import_guard(ex: Executor) -> None:
    assert "error" not in ex.run("import math, numpy.linalg\nfrom collections import Counter")
    r = ex.run("import os.path")
    assert r["error_type"] == "ImportError" and "'os.path'" in r["error"]
    assert ex.run("__import__('subprocess')")["error_type"] == "ImportError"
    guard = make_import_guard(["math"])
    with pytest.raises(ImportError, match="relative"):
        guard("x", level=1)


def test_executor_duration_is_measured(ex: Executor) -> None:
    r = ex.run("sum(range(1000))")
    assert r["duration_ms"] >= 0 and r["value"] == "499500"


# ----------------------------------------------------------------------------- config


def test_load_config_toml(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[sandbox]\ntimeout_s = 3.5\nmax_sessions = 8\nallowed_modules = ['math']\n")
    cfg = load_config(SandboxConfig, p, section="sandbox")
    assert cfg.timeout_s == 3.5 and cfg.max_sessions == 8 and cfg.allowed_modules == ("math",)
    assert cfg.memory_mb == 1024  # default kept


def test_load_config_yaml_with_dotted_overrides(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("sandbox:\n  timeout_s: 3\n  memory_mb: 512\n")
    cfg = load_config(SandboxConfig, p, section="sandbox",
                      overrides=["timeout_s=7", "require_isolation=true",
                                 'allowed_modules=["math", "sympy"]'])
    assert cfg.timeout_s == 7 and cfg.memory_mb == 512 and cfg.require_isolation is True
    assert cfg.allowed_modules == ("math", "sympy")
    with pytest.raises(ConfigError, match="sandbox"):  # the root is not a SandboxConfig
        load_config(SandboxConfig, p)
    assert apply_overrides({"sandbox": {"timeout_s": 3}}, ["sandbox.timeout_s=7"]) == {
        "sandbox": {"timeout_s": 7}}


def test_overrides_only_and_nested_sections() -> None:
    cfg = load_config(SandboxConfig, overrides=["max_output_chars=100"])
    assert cfg.max_output_chars == 100
    assert apply_overrides({}, ["a.b.c=x y"]) == {"a": {"b": {"c": "x y"}}}
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["novalue"])
    with pytest.raises(ConfigError, match="not a section"):
        apply_overrides({"a": 1}, ["a.b=2"])


@pytest.mark.parametrize("suffix, text", [
    (".toml", "timeout_s = -1\n"),
    (".yaml", "timeout_s: -1\n"),
])
def test_bad_field_names_file_and_field(tmp_path: Path, suffix: str, text: str) -> None:
    p = tmp_path / f"bad{suffix}"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(SandboxConfig, p)
    msg = str(info.value)
    assert str(p) in msg and "timeout_s" in msg and "SandboxConfig" in msg


def test_unknown_field_and_bad_override_are_config_errors(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("timeout = 3\n")
    with pytest.raises(ConfigError, match=r"c\.toml.*timeout"):
        load_config(SandboxConfig, p)
    with pytest.raises(ConfigError, match=r"overrides.*memory_mb"):
        load_config(SandboxConfig, overrides=["memory_mb=1"])
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("name, text, match", [
    ("c.json", "{}", "unknown config format"),
    ("c.toml", "x = [", "not valid TOML"),
    ("c.yaml", "a: [1, 2", "not valid YAML"),
    ("c.yaml", "- 1\n- 2\n", "top level"),
])
def test_unreadable_configs(tmp_path: Path, name: str, text: str, match: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_config(SandboxConfig, p)
    assert str(p) in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(SandboxConfig, tmp_path / "nope.toml")


def test_config_assignment_is_validated() -> None:
    cfg = SandboxConfig()
    with pytest.raises(ValueError):
        cfg.max_sessions = 0


def test_importing_config_does_not_import_torch() -> None:
    code = ("import sys, agentmath.config, agentmath.sandbox\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'vllm', 'ray')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
