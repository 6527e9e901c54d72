"""What trace readers yield and report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage


class TraceRecord(NamedTuple):
    """One message and where it was: the 1-based line (JSONL) or record (``.binpb``)."""

    line: int
    message: OmniMessage


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A malformed line a tolerant reader left out.

    ``last`` marks the final non-empty line, which the reference ignores
    silently. It is a torn tail (a crash mid-write) when the data ends inside
    it, ``terminated`` False; a last line with its newline was written whole
    and is simply malformed. Any other is a malformed middle line.
    """

    line: int
    reason: str
    last: bool
    terminated: bool = True

    @property
    def torn(self) -> bool:
        return self.last and not self.terminated


SkipCallback = Callable[[SkippedLine], None]
