"""The package's layers, written down once, and a check of its import graph.

From the bottom: the ground floor (the vocabulary, trace-context
propagation, spec loading), the codec, the protocol's builders, trace I/O,
the client, engines, the runtime, the transports, the server's
observability, the server bootstrap, and the CLI at the top. A module may
import its own layer's modules and those below, never one above; no two
modules import each other, directly or round a longer cycle; the two
transports know nothing of each other; and a transport sees the runtime
only through its seam (``runtime.interface`` and ``runtime.errors``).
docs/architecture.md draws the same floors.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import omni_grpc

PACKAGE = Path(omni_grpc.__file__).parent

# Bottom first; a module belongs to the layer of its longest listed prefix.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "ground",
        [
            "omni_grpc.vocabulary",
            "omni_grpc.propagation",
            "omni_grpc._imports",
            "omni_grpc.message_size",
            "omni_grpc.event_ids",
        ],
    ),
    ("codec", ["omni_grpc.convert"]),
    ("protocol", ["omni_grpc.protocol"]),
    ("trace", ["omni_grpc.trace"]),
    ("client", ["omni_grpc.client"]),
    ("engines", ["omni_grpc.engines"]),
    ("runtime", ["omni_grpc.runtime"]),
    ("transports", ["omni_grpc.transport"]),
    ("observability", ["omni_grpc.observability"]),
    ("server", ["omni_grpc.server", "omni_grpc.descriptors"]),
    ("cli", ["omni_grpc.cli", "omni_grpc.__main__"]),
]
# The package's root module (its version and docstring) and the page's assets.
UNLAYERED = {"omni_grpc", "omni_grpc.web"}

# What a transport may import from the runtime: its interface, its errors, and
# AgentService's calls over it (the schema's semantics, whatever the wire).
SEAM = {
    "omni_grpc.runtime.interface",
    "omni_grpc.runtime.errors",
    "omni_grpc.runtime.agent_service",
}
# Transports that must not import each other.
SIBLINGS = [
    "omni_grpc.transport.grpc",
    "omni_grpc.transport.sse",
    "omni_grpc.transport.connect",
    "omni_grpc.transport.a2a",
]


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in package.rglob("*.py")}


def imports_of(path: Path, known: Mapping[str, Path]) -> set[str]:
    """The package's modules ``path`` imports, at any depth of the file
    (``from package import module`` counts the module, not the package)."""
    tree = ast.parse(path.read_text(), str(path))
    package_root = next(iter(known)).split(".")[0]
    here = next(name for name, p in known.items() if p == path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.add(candidate if candidate in known else base)
    return {name for name in out if name.split(".")[0] == package_root and name in known}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports_of(path, known) - {name} for name, path in known.items()}


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def upward_imports(g: Mapping[str, set[str]]) -> list[str]:
    out = []
    for name, imported in sorted(g.items()):
        here = layer_of(name)
        for other in sorted(imported):
            there = layer_of(other)
            if here is not None and there is not None and there > here:
                out.append(f"{name} ({LAYERS[here][0]}) imports {other} ({LAYERS[there][0]})")
    return out


def cycles(g: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def seam_breaches(g: Mapping[str, set[str]]) -> list[str]:
    out = []
    for name, imported in sorted(g.items()):
        if not name.startswith("omni_grpc.transport"):
            continue
        for other in sorted(imported):
            if layer_of(other) == layer_of("omni_grpc.runtime") and other not in SEAM:
                out.append(f"{name} imports {other}")
            mine = [s for s in SIBLINGS if name.startswith(s)]
            theirs = [s for s in SIBLINGS if other.startswith(s)]
            if mine and theirs and mine != theirs:
                out.append(f"{name} imports the other transport's {other}")
    return out


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in modules() if layer_of(m) is None and m not in UNLAYERED]
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_no_import_runs_from_a_lower_layer_to_a_higher_one() -> None:
    wrong = upward_imports(graph())
    assert not wrong, "\n".join(wrong)


def test_no_modules_import_each_other() -> None:
    assert cycles(graph()) == []


def test_transports_depend_on_the_runtime_interface_alone() -> None:
    wrong = seam_breaches(graph())
    assert not wrong, "\n".join(wrong)


def test_the_checks_can_fail() -> None:
    """Each check finds what it looks for in a graph made to have it."""
    g = {
        "omni_grpc.vocabulary": {"omni_grpc.runtime.hub"},
        "omni_grpc.runtime.hub": {"omni_grpc.vocabulary"},
        "omni_grpc.transport.sse.app": {"omni_grpc.runtime.hub", "omni_grpc.transport.grpc"},
        "omni_grpc.transport.grpc": set(),
    }
    assert upward_imports(g) == [
        "omni_grpc.vocabulary (ground) imports omni_grpc.runtime.hub (runtime)"
    ]
    assert cycles(g) == [["omni_grpc.runtime.hub", "omni_grpc.vocabulary"]]
    assert sorted(seam_breaches(g)) == [
        "omni_grpc.transport.sse.app imports omni_grpc.runtime.hub",
        "omni_grpc.transport.sse.app imports the other transport's omni_grpc.transport.grpc",
    ]
