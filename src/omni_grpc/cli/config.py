"""``serve --config FILE``: the serve flags from a TOML file.

Every flag has a key, its name without the dashes (``grpc-port = 50051``;
``grpc_port`` works too). A flag that takes no value (``no-http``) is a
boolean; a repeatable one (``cors-origin``) a list; ``engine-opt`` a table
or a list of ``KEY=VALUE`` strings. The file's keys become flags placed
before the command line's, so a flag given on the command line wins (for a
repeatable flag, the command line's values replace the file's). The
environment variables some flags default to (``$OMNI_AUTH_TOKEN``,
``$OPENAI_BASE_URL``, ``$OPENAI_MODEL``) count only when neither sets the
flag. Relative paths are read as on the command line, from the current
directory.
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """The file cannot be read, or holds a key or value no flag takes."""


def _config_path(words: Sequence[str]) -> str | None:
    for i, word in enumerate(words):
        if word == "--config" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--config="):
            return word.split("=", 1)[1]
    return None


def _given(flag: str, words: Sequence[str]) -> bool:
    return any(word == flag or word.startswith(flag + "=") for word in words)


def expand(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """``words`` (a serve command line after ``serve``) with the file's flags
    put in front; unchanged without ``--config``. Raises ConfigError."""
    path = _config_path(words)
    if path is None:
        return words
    try:
        table = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {path}: not TOML: {exc}") from None
    actions = {
        option[2:]: action
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option not in ("--help", "--config")
    }
    flags: list[str] = []
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        action = actions.get(key)
        if action is None:
            hint = difflib.get_close_matches(key, list(actions), n=1)
            extra = f" (did you mean {hint[0]}?)" if hint else ""
            raise ConfigError(f"--config {path}: unknown key {raw_key!r}{extra}")
        flag = f"--{key}"
        if not _given(flag, words):
            flags += _flag_words(path, raw_key, flag, action, value)
    return flags + words


def _flag_words(path: str, key: str, flag: str, action: argparse.Action, value: Any) -> list[str]:
    where = f"--config {path}: {key}"
    if action.nargs == 0:  # store_true
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, not {value!r}")
        return [flag] if value else []
    if isinstance(action, argparse._AppendAction):
        if isinstance(value, dict):
            items = [f"{k}={_scalar(where, v)}" for k, v in value.items()]
        elif isinstance(value, list):
            items = [_scalar(where, v) for v in value]
        else:
            items = [_scalar(where, value)]
        return [word for item in items for word in (flag, item)]
    if isinstance(value, list):
        items = [_scalar(where, v) for v in value]
        return [flag, ",".join(items)]  # the comma lists, such as allow-client-modes
    return [flag, _scalar(where, value)]


def _scalar(where: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(f"{where}: expected a string or a number, not {type(value).__name__}")
