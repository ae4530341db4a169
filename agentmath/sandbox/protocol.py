"""Framing of messages between the host, the zygote and the workers.

Every message is a 4-byte big-endian length followed by UTF-8 JSON. JSON, never pickle:
unpickling bytes that come out of the sandbox would run code in the host. Frames larger than
``MAX_FRAME`` are a protocol violation (the worker caps output before it gets here).
"""

from __future__ import annotations

import json
import re
import socket
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


class ProtocolError(Exception):
    """A peer sent something that is not a valid frame."""


# ASCII JSON: lone surrogates (from undecodable input or a snippet's output) become escapes
# instead of an encoding error, so any str can cross the boundary. One encoder and one decoder
# for the process: json.dumps/json.loads with non-default arguments build a new one (and its
# C scanner) on every call, a tenth of a trivial round trip.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def encode(message: dict[str, Any]) -> bytes:
    """Serialise one message into a frame."""
    body = _ENCODER.encode(message).encode("ascii")
    return HEADER.pack(len(body)) + body


MAX_INT_DIGITS = 20  # request ids are 62-bit; no field of the protocol needs a longer integer
MAX_DEPTH = 8  # the protocol's messages are at most three levels deep


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ProtocolError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _reject_constant(name: str) -> float:
    raise ProtocolError(f"a non-finite number ({name})")


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_constant=_reject_constant)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: fast in C


def _nesting_depth_ok(body: bytes) -> bool:
    """Whether arrays and objects nest at most ``MAX_DEPTH`` deep, checked before parsing.

    ``json.loads`` recurses once per level, so a deep enough document raises RecursionError
    (or exhausts the C stack) inside the decoder. Strings are blanked first (a regex, in C), so
    output full of brackets costs nothing; only structural brackets are then counted.
    """
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return True
    depth = 0
    for byte in _STRING.sub(b'""', body):
        if byte == 0x5B or byte == 0x7B:  # [ {
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif byte == 0x5D or byte == 0x7D:  # ] }
            depth -= 1
    return True


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse a frame body; anything but a well-formed JSON object is a :class:`ProtocolError`.

    A frame comes from a process that runs hostile code, so decoding itself must not fail in
    any other way: nesting deeper than the protocol uses, integers longer than it uses,
    non-finite numbers and invalid UTF-8 are all refused as protocol violations (each with its
    true reason), and any other decoder failure is turned into one too.
    """
    if not _nesting_depth_ok(body):
        raise ProtocolError(f"a frame nested deeper than {MAX_DEPTH} levels")
    try:
        message = _DECODER.decode(body.decode("utf-8"))
    except ProtocolError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"undecodable frame: {str(exc)[:200]}") from exc
    except (ValueError, RecursionError, MemoryError, TypeError) as exc:
        raise ProtocolError(f"undecodable frame ({type(exc).__name__})") from exc
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_message(sock: socket.socket) -> dict[str, Any] | None:
    """Blocking read of one message; None on a clean end of stream."""
    header = _recv_exact(sock, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes exceeds the {MAX_FRAME} byte limit")
    body = _recv_exact(sock, size)
    if body is None:
        raise ProtocolError("stream ended inside a frame")
    return decode_body(body)


def read_message(stream: BinaryIO) -> dict[str, Any] | None:
    """Like :func:`recv_message` but from a buffered binary stream (fewer syscalls)."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        if header:
            raise ProtocolError("stream ended inside a frame header")
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes exceeds the {MAX_FRAME} byte limit")
    body = stream.read(size)
    if len(body) < size:
        raise ProtocolError("stream ended inside a frame")
    return decode_body(body)


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Blocking write of one message."""
    sock.sendall(encode(message))


class FrameBuffer:
    """Incremental frame parser for the host's asyncio protocols."""

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add bytes; return the complete messages they finish, in order."""
        self._buf += data
        out = []
        while len(self._buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buf)
            if size > self.max_frame:
                raise ProtocolError(
                    f"frame of {size} bytes exceeds the {self.max_frame} byte limit")
            end = HEADER.size + size
            if len(self._buf) < end:
                break
            out.append(decode_body(bytes(self._buf[HEADER.size:end])))
            del self._buf[:end]
        return out
