"""The generated fast path's decoder and encoder of each object type.

Apart from ``_fastpath`` because ``_fastpath_generated`` imports that
module: the lookup imports the generated one, so no two modules import
each other.
"""

from __future__ import annotations

from typing import Any

from omni_grpc.convert._fastpath import Decoder, Encoder
from omni_grpc.convert._schema import ObjectSpec

_decoders: dict[int, Decoder] = {}
_encoders: dict[int, Encoder] = {}


def decoder_for(spec: ObjectSpec) -> Decoder:
    found = _decoders.get(id(spec))
    if found is None:
        found = _decoders[id(spec)] = _generated(spec, "DECODERS")
    return found


def encoder_for(spec: ObjectSpec) -> Encoder:
    found = _encoders.get(id(spec))
    if found is None:
        found = _encoders[id(spec)] = _generated(spec, "ENCODERS")
    return found


def _generated(spec: ObjectSpec, table: str) -> Any:
    # Imported on first use: a process that only takes the native path
    # never needs it.
    from omni_grpc.convert import _fastpath_generated

    name = spec.message.DESCRIPTOR.full_name
    try:
        return getattr(_fastpath_generated, table)[name]
    except KeyError:
        raise LookupError(
            f"no generated fast path for {name}: run python -m omni_grpc.convert._fastpath_gen"
        ) from None
