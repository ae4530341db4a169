"""Framing of messages between the host, the zygote and the workers.

Every message is a 4-byte big-endian length followed by UTF-8 JSON. JSON, never pickle:
unpickling bytes that come out of the sandbox would run code in the host. Frames larger than
``MAX_FRAME`` are a protocol violation (the worker caps output before it gets here).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


class ProtocolError(Exception):
    """A peer sent something that is not a valid frame."""


def encode(message: dict[str, Any]) -> bytes:
    """Serialise one message into a frame."""
    # ASCII JSON: lone surrogates (from undecodable input or a snippet's output) become
    # escapes instead of an encoding error, so any str can cross the boundary.
    body = json.dumps(message, separators=(",", ":")).encode("ascii")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse a frame body; anything but a JSON object is a :class:`ProtocolError`."""
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"undecodable frame: {exc}") from exc
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
