"""The options every client command shares: where the server is, the token,
TLS. ``run``, ``attach``, ``sessions``, ``history``, ``approve`` and ``abort``
take them alike, so a flag learnt once works everywhere."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from omni_grpc.cli.target import DEFAULT_PORT, TargetError, split_url, with_default_port
from omni_grpc.client import AgentClient

DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_PORT}"


class ConnectionUsageError(ValueError):
    """The connection options contradict each other."""


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=os.environ.get("OMNI_TARGET") or DEFAULT_TARGET,
        help=f"HOST[:PORT] of the server, or the grpc:// or grpcs:// (TLS) URL serve "
        f"prints; the port defaults to {DEFAULT_PORT} (default $OMNI_TARGET, else "
        f"{DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("OMNI_AUTH_TOKEN"),
        help="bearer token (default $OMNI_AUTH_TOKEN)",
    )
    parser.add_argument("--tls", action="store_true", help="use TLS with the system roots")
    parser.add_argument("--tls-ca", type=Path, help="PEM CA to verify the server (implies TLS)")
    parser.add_argument("--tls-cert", type=Path, help="client certificate for mTLS")
    parser.add_argument("--tls-key", type=Path, help="client key for mTLS")


def connection_flags(args: argparse.Namespace) -> str:
    """The options that reach the same server again, for a command shown to
    the user to paste (the token stays out: the printed line may be logged)."""
    flags: list[str] = []
    if args.target != DEFAULT_TARGET:
        flags += ["--target", args.target]
    if args.tls:
        flags.append("--tls")
    for flag, path in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert),
                       ("--tls-key", args.tls_key)):  # fmt: skip
        if path is not None:
            flags += [flag, str(path)]
    return "".join(f" {shlex.quote(flag)}" for flag in flags)


def check_connection_options(args: argparse.Namespace) -> None:
    """Raises ConnectionUsageError for options no connection could satisfy."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConnectionUsageError("--tls-cert and --tls-key go together")
    try:
        split_url(args.target)
    except TargetError as exc:
        raise ConnectionUsageError(str(exc)) from None


def client_from(args: argparse.Namespace) -> AgentClient:
    """The client the options describe (reads the TLS files: may raise OSError)."""
    address, tls = split_url(args.target)
    return AgentClient(
        with_default_port(address),
        token=args.token or None,
        tls=args.tls or tls,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
