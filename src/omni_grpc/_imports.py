"""Resolving ``module:object`` specs, as ``--engine`` and ``tools=`` take them."""

from __future__ import annotations

import importlib
from typing import Any


def import_object(spec: str) -> Any:
    """The object ``spec`` names: ``package.module:name`` or ``module:outer.inner``.

    Raises ``LookupError`` with a message fit for the user (the caller adds
    which option it was).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise LookupError("expected 'module:object'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LookupError(f"cannot import {module_name!r}: {exc}") from exc
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise LookupError(f"{module_name!r} has no {attr!r}") from None
    return found
