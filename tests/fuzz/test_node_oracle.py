"""Hypothesis against a Node oracle: ``JSON.stringify(JSON.parse(x))``.

For a text x (a protocol object written any way at all: other whitespace,
number spellings, escapes, duplicate keys, unknown keys and kinds), JavaScript
decides what it means: y = JSON.stringify(JSON.parse(x)). Then

* y is a line JavaScript writes, so the codec gives it back byte for byte
  (or refuses it as no protocol object, with ConversionError);
* x itself either converts to a line that means y to JavaScript, or is
  refused with ConversionError.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_convert_properties import envelopes, json_values

from omni_grpc.convert import ConversionError, parse_message, serialize_message
from omni_grpc.convert._jsontext import dump_value

HERE = Path(__file__).parent
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(
    NODE is None and not os.environ.get("OMNI_REQUIRE_TOOLCHAINS"),
    reason="node is not installed",
)


class Oracle:
    def __init__(self) -> None:
        assert NODE is not None
        self.process = subprocess.Popen(
            [NODE, str(HERE / "node_oracle.mjs")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def __call__(self, text: str) -> str | None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(text) + "\n")
        self.process.stdin.flush()
        answer: str | None = json.loads(self.process.stdout.readline())
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    node = Oracle()
    yield node
    node.close()


def respell(value: Any, rng: random.Random) -> str:
    """``value`` as JSON text JavaScript would not write but reads the same."""
    kind = type(value)
    if kind is dict:
        items = [f"{json.dumps(k)} : {respell(v, rng)}" for k, v in value.items()]
        if items and rng.random() < 0.2:  # a duplicate key: the last value wins
            key = rng.choice(list(value))
            items.insert(0, f"{json.dumps(key)}:{respell(value[key], rng)}")
        return "{ " + " ,\n".join(items) + " }"
    if kind is list:
        return "[ " + ", ".join(respell(v, rng) for v in value) + "]"
    if kind is float and rng.random() < 0.5:
        return repr(value).replace("e", "E")
    if kind is int and rng.random() < 0.3:
        return f"{value}.0e0"
    if kind is str and rng.random() < 0.5:
        return json.dumps(value, ensure_ascii=True)
    return dump_value(value)


@st.composite
def texts(draw: st.DrawFn) -> str:
    obj = draw(envelopes())
    if draw(st.integers(0, 5)) == 0:
        obj.setdefault("payload", {})[draw(st.sampled_from(["7", "01", "b"]))] = draw(json_values)
    rng = random.Random(draw(st.integers(0, 2**32)))
    return respell(obj, rng) if draw(st.booleans()) else dump_value(obj)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts())
def test_the_codec_agrees_with_javascript(oracle: Oracle, text: str) -> None:
    meaning = oracle(text)
    event("javascript refuses" if meaning is None else "javascript reads it")
    if meaning is None:  # JavaScript refuses it too
        with pytest.raises(ConversionError):
            parse_message(text)
        return
    try:
        written = serialize_message(parse_message(meaning)).decode()
    except ConversionError:
        event("its line is no protocol object")
    else:
        event("its line round-trips")
        assert written == meaning  # a line JavaScript writes comes back byte for byte
    try:
        converted = serialize_message(parse_message(text)).decode()
    except ConversionError:
        event("the text is refused")
        return
    event("the text converts")
    assert oracle(converted) == meaning
