"""The framing of the commands a pool sends its workers: a 4-byte big-endian length, then a
pickle. One module both ends import, so neither end imports the other."""

from __future__ import annotations

import pickle
import struct


def frame(obj: object) -> bytes:
    """One command as the pool writes it."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack(">I", len(data)) + data


def read_command(stream) -> object | None:
    """The next command a worker reads, or None when the pool closed the pipe."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    return pickle.loads(stream.read(size))
