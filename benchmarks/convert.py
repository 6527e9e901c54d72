"""Conversion throughput: JSON -> proto -> JSON over the conformance corpus
replicated to N messages, beside two baselines measured in the same run:

* floor: orjson loads + dumps of the same lines (no protobuf at all);
* json_format: protobuf's own JSON mapping (MessageToJson + Parse) on the
  same messages, the usual way to move JSON through protobuf in Python.

Usage: python benchmarks/convert.py [--messages 100000] [--repeat 3]
Reports messages/s (best of --repeat interleaved rounds, on thread CPU time)
and the ratio to the floor, then the round trip of the Struct/schema-heavy
``tool_list_ready`` lines on their own, and of provider-shaped lines
(``benchmarks/sizes.py``'s styles: reasoning tokens, signatures, images as
data URLs and inline data, 5-60 KB tool arguments).
``OMNI_GRPC_NATIVE=0`` measures the pure-Python codec.
"""

from __future__ import annotations

import argparse
import os
import statistics

import orjson
from _common import corpus_lines, interleaved_rates  # benchmarks/_common.py, beside this file
from google.protobuf import json_format
from sizes import STYLES, style_lines  # benchmarks/sizes.py, beside this file

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc_proto.omni.v1 import omni_pb2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = corpus_lines()
    lines = (base * (args.messages // len(base) + 1))[: args.messages]
    messages = [parse_message(line) for line in lines]
    assert all(serialize_message(m) == line for m, line in zip(messages, lines, strict=True))

    def floor() -> int:
        for line in lines:
            orjson.dumps(orjson.loads(line))
        return len(lines)

    def ours() -> int:
        for line in lines:
            serialize_message(parse_message(line))
        return len(lines)

    def ours_parse() -> int:
        for line in lines:
            parse_message(line)
        return len(lines)

    def ours_serialize() -> int:
        for message in messages:
            serialize_message(message)
        return len(messages)

    def protobuf_json_format() -> int:
        for message in messages:
            json_format.Parse(json_format.MessageToJson(message), omni_pb2.OmniMessage())
        return len(messages)

    results = interleaved_rates(
        {
            "floor (orjson loads+dumps)": floor,
            "omni-grpc JSON->proto->JSON": ours,
            "  of which JSON->proto": ours_parse,
            "  of which proto->JSON": ours_serialize,
            "protobuf json_format round trip": protobuf_json_format,
        },
        args.repeat,
    )
    floor_rate = results["floor (orjson loads+dumps)"]
    size = statistics.mean(len(line) for line in lines)
    native = os.environ.get("OMNI_GRPC_NATIVE", "auto")
    print(f"{len(lines)} messages, mean {size:.0f} bytes, best of {args.repeat}")
    print(f"OMNI_GRPC_NATIVE={native}")
    print(f"{'':34} {'messages/s':>12} {'floor/x':>8}")
    for name, rate in results.items():
        print(f"{name:34} {rate:12,.0f} {floor_rate / rate:8.1f}")
    tools = [
        line for line in base if orjson.loads(line)["payload"].get("type") == "tool_list_ready"
    ]
    if tools:
        lines = (tools * (args.messages // 10 // len(tools) + 1))[: args.messages // 10]
        rates = interleaved_rates({"floor": floor, "ours": ours}, args.repeat)
        floor_rate, rate = rates["floor"], rates["ours"]
        print(
            f"{'tool_list_ready alone, round trip':34} {rate:12,.0f} {floor_rate / rate:8.1f}"
            f"  ({len(lines)} lines)"
        )

    provider = [
        line for style in STYLES if style != "schema-heavy" for line in style_lines(style, 10, 1)
    ]
    lines = (provider * (args.messages // 20 // len(provider) + 1))[: args.messages // 20]
    rates = interleaved_rates({"floor": floor, "ours": ours}, args.repeat)
    floor_rate, rate = rates["floor"], rates["ours"]
    size = statistics.mean(len(line) for line in lines)
    print(
        f"{'provider-shaped, round trip':34} {rate:12,.0f} {floor_rate / rate:8.1f}"
        f"  ({len(lines)} lines, mean {size:,.0f} bytes)"
    )


if __name__ == "__main__":
    main()
