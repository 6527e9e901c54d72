"""``--engine SPEC`` -> an Engine.

A small registry: each entry matches a spec by exact name or prefix (a scheme
such as ``command:`` or ``grpc://``) and builds the engine from the spec and
the ``--engine-opt key=value`` options. Adding an engine is one ``register``
call; anything no entry claims is tried as ``module:factory``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from omni_grpc._imports import import_object
from omni_grpc.engines.base import Engine

# Builds an engine from the full spec string and the --engine-opt options.
SpecFactory = Callable[[str, dict[str, str]], Engine]


class EngineLoadError(ValueError):
    """The spec names no engine, or its factory refused the options."""


@dataclass(frozen=True)
class _Entry:
    key: str
    prefix: bool
    factory: SpecFactory
    help: str


_REGISTRY: list[_Entry] = []


def register(key: str, factory: SpecFactory, *, prefix: bool = False, help: str = "") -> None:
    """Registers ``key`` (an exact name, or with ``prefix=True`` a spec prefix)."""
    global _REGISTRY
    _REGISTRY = [e for e in _REGISTRY if e.key != key]
    _REGISTRY.append(_Entry(key, prefix, factory, help))


def registered() -> list[tuple[str, str]]:
    """``(spec or prefix, help)`` pairs, for ``--help`` texts."""
    return [(e.key + ("..." if e.prefix else ""), e.help) for e in _REGISTRY]


def load_engine(spec: str = "demo", options: dict[str, str] | None = None) -> Engine:
    opts = dict(options or {})
    spec = spec.strip() or "demo"
    # Longest prefix first, so "grpc+tls://" can sit beside "grpc://".
    for entry in sorted(_REGISTRY, key=lambda e: -len(e.key)):
        if spec == entry.key or (entry.prefix and spec.startswith(entry.key)):
            return _build(spec, entry.factory, opts)
    if ":" in spec:
        return _build(spec, _from_module, opts)
    known = ", ".join(k for k, _ in registered())
    raise EngineLoadError(f"unknown engine {spec!r}: use one of {known}, or module:factory")


def _build(spec: str, factory: SpecFactory, options: dict[str, str]) -> Engine:
    try:
        engine = factory(spec, options)
    except EngineLoadError:
        raise
    except (TypeError, ValueError) as exc:
        raise EngineLoadError(f"engine {spec!r}: {exc}") from exc
    if not callable(getattr(engine, "run", None)):
        raise EngineLoadError(
            f"engine {spec!r}: the factory returned {engine!r}, which has no run()"
        )
    return engine


def _from_module(spec: str, options: dict[str, str]) -> Engine:
    try:
        factory = import_object(spec)
    except LookupError as exc:
        raise EngineLoadError(f"engine {spec!r}: {exc}") from exc
    if not callable(factory):
        raise EngineLoadError(f"engine {spec!r}: {spec.partition(':')[2]!r} is not callable")
    engine: Engine = factory(**options)
    return engine


def _demo(spec: str, options: dict[str, str]) -> Engine:
    from omni_grpc.engines import demo

    return demo.create(**options)


register("demo", _demo, help="the embedded deterministic demo engine (pacing=, repeat=)")
register("openai", lambda s, o: importlib.import_module("omni_grpc.engines.openai").create(**o), help="an agent loop over an OpenAI-compatible endpoint (base_url=, model=, tools=)")  # fmt: skip  # noqa: E501
register("replay:", lambda s, o: importlib.import_module("omni_grpc.engines.replay").create(s, **o), prefix=True, help="serve a recorded .jsonl/.binpb trace as live runs (delay_ms=, chunk=, turns=)")  # fmt: skip  # noqa: E501
register("command:", lambda s, o: importlib.import_module("omni_grpc.engines.command").create(s, **o), prefix=True, help="any program speaking JSONL on stdio (grace_ms=, idle_timeout=, cwd=)")  # fmt: skip  # noqa: E501
register("sse+http", lambda s, o: importlib.import_module("omni_grpc.engines.sse_upstream").create(s, **o), prefix=True, help="a reference-compatible SSE server as upstream: sse+http(s)://host:port (token=, timeout=, project=, agent=)")  # fmt: skip  # noqa: E501
register("grpc://", lambda s, o: importlib.import_module("omni_grpc.engines.grpc_upstream").create(s, **o), prefix=True, help="proxy to another AgentService (token=, ca=, grace_ms=)")  # fmt: skip  # noqa: E501
register("grpcs://", lambda s, o: importlib.import_module("omni_grpc.engines.grpc_upstream").create(s, **o), prefix=True, help="proxy to another AgentService over TLS (token=, ca=, grace_ms=)")  # fmt: skip  # noqa: E501
