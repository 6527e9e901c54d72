"""``serve --config FILE`` and ``OMNI_*``: the serve flags from a TOML file
and from the environment.

Every flag has a key, its name without the dashes (``grpc-port = 50051``;
``grpc_port`` works too). A flag that takes no value (``no-http``) is a
boolean; a repeatable one (``cors-origin``) a list; ``engine-opt`` a table
or a list of ``KEY=VALUE`` strings.

Every flag also has an environment variable: ``OMNI_`` and its name in
capitals, dashes as underscores (``--grpc-port`` is ``OMNI_GRPC_PORT``,
``--no-http`` is ``OMNI_NO_HTTP=true``; a repeatable flag takes a
comma-separated list, ``OMNI_ENGINE_OPT=model=m,base_url=http://x``).
``OMNI_CONFIG`` names the file when ``--config`` does not. An empty
variable counts as unset.

Precedence, highest first: the command line, the environment, the file, the
flags' own defaults (``$OPENAI_BASE_URL`` and ``$OPENAI_MODEL`` among them),
as for twelve-factor services. A repeatable flag takes its values from one
source only, the highest that sets it. Everything is turned into flags
placed before the command line's; relative paths are read as on the command
line, from the current directory.
"""

from __future__ import annotations

import argparse
import difflib
import os
import tomllib
from collections.abc import Mapping, Sequence
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


ENV_PREFIX = "OMNI_"
CONFIG_ENV = "OMNI_CONFIG"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_name(flag: str) -> str:
    """``--grpc-port`` -> ``OMNI_GRPC_PORT``."""
    return ENV_PREFIX + flag.removeprefix("--").replace("-", "_").upper()


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's long flags by name without dashes (not --help, --config)."""
    return {
        option[2:]: action
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option not in ("--help", "--config")
    }


def expand(
    parser: argparse.ArgumentParser,
    words: list[str],
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """``words`` (a serve command line after ``serve``) with the flags the
    environment and the file set put in front, each only where nothing
    higher sets it. Raises ConfigError."""
    environ = os.environ if environ is None else environ
    actions = _flags(parser)
    from_env: list[str] = []
    for key, action in actions.items():
        flag, name = f"--{key}", env_name(f"--{key}")
        if environ.get(name) and not _given(flag, words):
            from_env += _env_words(name, flag, action, environ[name])
    path = _config_path(words) or environ.get(CONFIG_ENV) or None
    if path is None:
        return from_env + words
    where = path if _config_path(words) else f"{path} (${CONFIG_ENV})"
    try:
        table = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--config {where}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {where}: not TOML: {exc}") from None
    from_file: list[str] = []
    for raw_key, value in table.items():
        key = raw_key.replace("_", "-")
        keyed = actions.get(key)
        if keyed is None:
            hint = difflib.get_close_matches(key, list(actions), n=1)
            extra = f" (did you mean {hint[0]}?)" if hint else ""
            raise ConfigError(f"--config {where}: unknown key {raw_key!r}{extra}")
        flag = f"--{key}"
        if not _given(flag, words) and not _given(flag, from_env):
            from_file += _flag_words(path, raw_key, flag, keyed, value)
    return from_file + from_env + words


def _env_words(name: str, flag: str, action: argparse.Action, value: str) -> list[str]:
    if action.nargs == 0:  # store_true
        word = value.strip().lower()
        if word not in _TRUE + _FALSE:
            raise ConfigError(f"${name}: expected true or false, not {value!r}")
        return [flag] if word in _TRUE else []
    if isinstance(action, argparse._AppendAction):
        items = [item.strip() for item in value.split(",") if item.strip()]
        return [word for item in items for word in (flag, item)]
    return [flag, value]


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
