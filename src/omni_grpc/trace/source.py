"""Opening a trace source or sink given as a path, ``-`` or a binary stream."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

Source = str | os.PathLike[str] | BinaryIO


@contextmanager
def open_source(source: Source) -> Iterator[BinaryIO]:
    """A binary reader; paths are opened (and closed), ``-`` is stdin, a stream
    is used as it is and left open."""
    if isinstance(source, str | os.PathLike):
        if os.fspath(source) == "-":
            yield sys.stdin.buffer
            return
        with open(source, "rb", buffering=1024 * 1024) as stream:
            yield stream
        return
    yield source
