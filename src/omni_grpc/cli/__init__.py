"""The ``omni-grpc`` command line. Each subcommand lives in its own module and
registers itself through ``register(subparsers)``; ``main`` dispatches."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand modules, in the order ``--help`` lists them.
_COMMANDS = (
    "omni_grpc.cli.serve",
    "omni_grpc.cli.run",
    "omni_grpc.cli.convert",
    "omni_grpc.cli.validate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omni-grpc",
        description="The OmniMessage agent protocol over gRPC, protobuf and SSE.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
