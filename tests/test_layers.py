"""The package's import graph keeps to its layers (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import omni_grpc

PACKAGE = Path(omni_grpc.__file__).parent

# What a transport may import from the runtime: its interface and its errors.
SEAM = {"omni_grpc.runtime.interface", "omni_grpc.runtime.errors"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a import b`` counts ``a`` and, if
    it is a module of the package, ``a.b``), at any depth of the file."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path)
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
            out.add(base)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if _is_module(candidate):
                    out.add(candidate)
    return out


def _is_module(name: str) -> bool:
    if not name.startswith("omni_grpc."):
        return False
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").exists() or (PACKAGE / rel / "__init__.py").exists()


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def test_transports_depend_on_the_runtime_interface_alone() -> None:
    wrong = []
    for name, path in sorted(modules().items()):
        if not name.startswith("omni_grpc.transport"):
            continue
        for imported in sorted(imports_of(path)):
            runtime = imported == "omni_grpc.runtime" or imported.startswith("omni_grpc.runtime.")
            if runtime and imported not in SEAM:
                wrong.append(f"{name} imports {imported}")
    assert not wrong, "\n".join(wrong)
