"""The ``omni-grpc`` command line. Each subcommand lives in its own module and
registers itself through ``register(subparsers)``; ``main`` dispatches."""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence

from omni_grpc import __version__

# Each command's module, in the order ``--help`` lists them. A command builds
# only its own module's parser: a client verb (``abort``, ``approve``...)
# must not pay for importing the server, which ``serve``'s module does.
COMMANDS: dict[str, str] = {
    "serve": "omni_grpc.cli.serve",
    "run": "omni_grpc.cli.run",
    "chat": "omni_grpc.cli.chat",
    "attach": "omni_grpc.cli.attach",
    "sessions": "omni_grpc.cli.sessions",
    "history": "omni_grpc.cli.history",
    "approve": "omni_grpc.cli.control",
    "abort": "omni_grpc.cli.control",
    "convert": "omni_grpc.cli.convert",
    "validate": "omni_grpc.cli.validate",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``only``, a command's name) just the module that
    registers that command: ``serve`` imports the server, which every other
    command would otherwise load too."""
    parser = argparse.ArgumentParser(
        prog="omni-grpc",
        description="The OmniMessage agent protocol over gRPC, protobuf and SSE.",
    )
    parser.add_argument("--version", action="version", version=f"omni-grpc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in dict.fromkeys(COMMANDS.values()):
        if only is None or COMMANDS.get(only) == name:
            importlib.import_module(name).register(sub)
    return parser


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return parser


def _refuse(parser: argparse.ArgumentParser, unknown: list[str]) -> None:
    """Exits 2 with ``parser``'s usage, naming the unknown flags (the words
    after them were only misread as positionals) and the likely intended one."""
    flags = [word.split("=", 1)[0] for word in unknown if word.startswith("-")]
    message = f"unrecognized arguments: {' '.join(flags or unknown)}"
    known = [o for action in parser._actions for o in action.option_strings]
    hints = [m[0] for f in flags if (m := difflib.get_close_matches(f, known, n=1))]
    if hints:
        message += f" (did you mean {' / '.join(hints)}?)"
    parser.error(message)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if not words:
        # Asking for nothing is asking what there is: the help, not an error.
        build_parser().print_help()
        return 0
    if words == ["--version"]:
        print(f"omni-grpc {__version__}")  # what argparse's action prints, without a parser
        return 0
    parser = build_parser(words[0] if words[0] in COMMANDS else None)
    if words[0] == "serve":
        from omni_grpc.cli import config

        serve = _subcommand(parser, "serve")
        try:
            words = ["serve", *config.expand(serve, words[1:])]
        except config.ConfigError as exc:
            serve.error(str(exc))
        argv = words
    # argparse hands a subcommand's unknown flags up to the top-level parser,
    # whose usage says nothing about them, and a misspelt flag's value is then
    # read as a positional (`convert --frm jsonl a b` took "jsonl" as the
    # input). Collect them instead and let the subcommand's own parser refuse.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse(_subcommand(parser, args.command), unknown)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
