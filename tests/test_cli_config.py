"""``serve --config FILE``: a TOML file of serve flags, the command line winning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ServeProcess

from omni_grpc.cli import build_parser
from omni_grpc.cli.config import ConfigError, expand

CONFIG = """
# an operator's file
no-http = true
approval_mode = "ask"
auth-token = "file-token"
max-runs = 7
engine-opt = { repeat = "2" }
cors-origin = ["https://a.example", "https://b.example"]
"""


def _serve_parser() -> object:
    parser = build_parser("serve")
    return next(a for a in parser._actions if a.dest == "command").choices["serve"]  # type: ignore[attr-defined]


def test_the_file_sets_flags_and_the_command_line_wins(
    serve_process: ServeProcess, tmp_path: Path
) -> None:
    config = tmp_path / "omni.toml"
    config.write_text(CONFIG)
    served = serve_process("--config", str(config))
    text = "".join(served.banner)
    assert "approval mode ask" in text
    assert "auth bearer token" in text
    assert "HTTP" not in text  # no-http = true
    # The flag beats the file.
    overridden = serve_process(
        "--config", str(config), "--approval-mode", "deny-all", "--data-dir", str(tmp_path / "2")
    )  # fmt: skip
    assert "approval mode deny-all" in "".join(overridden.banner)


def test_every_serve_flag_has_a_key(tmp_path: Path) -> None:
    parser = _serve_parser()
    for action in parser._actions:  # type: ignore[attr-defined]
        flags = [o for o in action.option_strings if o.startswith("--")]
        if not flags or flags[0] in ("--help", "--config"):
            continue
        key = flags[0][2:]
        value: object = True if action.nargs == 0 else "1"
        expanded = _expand_text(parser, f"{key} = {_toml(value)}\n", tmp_path)
        assert expanded[0] == flags[0], key


def _toml(value: object) -> str:
    return "true" if value is True else f'"{value}"'


def _expand_text(parser: object, text: str, tmp_path: Path) -> list[str]:
    config = tmp_path / "one.toml"
    config.write_text(text)
    return expand(parser, ["--config", str(config)])  # type: ignore[arg-type]


def test_a_repeatable_flag_on_the_command_line_replaces_the_files(tmp_path: Path) -> None:
    parser = _serve_parser()
    config = tmp_path / "c.toml"
    config.write_text('cors-origin = ["https://a.example"]\nengine-opt = { repeat = "2" }\n')
    words = expand(parser, ["--config", str(config)])  # type: ignore[arg-type]
    assert words[:4] == ["--cors-origin", "https://a.example", "--engine-opt", "repeat=2"]
    mine = expand(parser, ["--config", str(config), "--cors-origin", "https://c.example"])  # type: ignore[arg-type]
    assert "https://a.example" not in mine and "https://c.example" in mine


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("grcp-port = 1\n", "unknown key 'grcp-port' (did you mean grpc-port?)"),
        ("no-http = 1\n", "no-http: expected true or false"),
        ("host = [1, [2]]\n", "host: expected a string or a number"),
        ("host = \n", "not TOML"),
    ],
)
def test_a_bad_file_is_a_usage_error_naming_the_key(tmp_path: Path, text: str, said: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert str(config) in done.stderr and said in done.stderr, done.stderr


def test_a_missing_file_is_named() -> None:
    with pytest.raises(ConfigError, match=r"nowhere\.toml"):
        expand(_serve_parser(), ["--config", "/nowhere.toml"])  # type: ignore[arg-type]


# Flags whose value "1" would not parse.
VALID = {"--allow-client-modes": "ask", "--session-ttl-traces": "keep",
         "--auth-token-file": __file__, "--tls-cert": __file__, "--tls-key": __file__,
         "--tls-client-ca": __file__}  # fmt: skip


def test_every_serve_flag_has_an_environment_variable(tmp_path: Path) -> None:
    parser = _serve_parser()
    for action in parser._actions:  # type: ignore[attr-defined]
        flags = [o for o in action.option_strings if o.startswith("--")]
        if not flags or flags[0] in ("--help", "--config"):
            continue
        name = "OMNI_" + flags[0][2:].replace("-", "_").upper()
        value = "true" if action.nargs == 0 else str(next(iter(action.choices or ["1"])))
        value = VALID.get(flags[0], value)
        expanded = expand(parser, [], {name: value})  # type: ignore[arg-type]
        assert expanded[:1] == [flags[0]], name
        # Parsed, the variable's value is the flag's.
        args = build_parser("serve").parse_args(["serve", *expanded])
        assert getattr(args, action.dest) not in (None, False), name


def test_the_command_line_beats_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    parser = _serve_parser()
    config = tmp_path / "c.toml"
    config.write_text(
        'approval-mode = "ask"\nmax-runs = 3\ncors-origin = ["https://file.example"]\n'
    )
    environ = {
        "OMNI_APPROVAL_MODE": "deny-all",
        "OMNI_CORS_ORIGIN": "https://a.example,https://b.example",
        "OMNI_MAX_RUNS": "",
        "OMNI_CONFIG": "/not/read/when/--config/is/given.toml",
    }

    def parsed(*words: str) -> object:
        expanded = expand(parser, ["--config", str(config), *words], environ)  # type: ignore[arg-type]
        return build_parser("serve").parse_args(["serve", *expanded])

    args = parsed()
    assert args.approval_mode == "deny-all"  # type: ignore[attr-defined]
    assert args.max_runs == 3  # type: ignore[attr-defined]  # an empty variable is unset
    # A repeatable flag takes its values from the highest source that sets it.
    assert args.cors_origin == ["https://a.example", "https://b.example"]  # type: ignore[attr-defined]
    args = parsed("--approval-mode", "read-only", "--cors-origin", "https://c.example")
    assert args.approval_mode == "read-only"  # type: ignore[attr-defined]
    assert args.cors_origin == ["https://c.example"]  # type: ignore[attr-defined]


def test_a_served_process_reads_the_environment_and_omni_config(
    serve_process: ServeProcess, tmp_path: Path
) -> None:
    config = tmp_path / "omni.toml"
    config.write_text('approval-mode = "ask"\nno-http = true\n')
    served = serve_process(env={"OMNI_CONFIG": str(config), "OMNI_APPROVAL_MODE": "read-only",
                                "OMNI_AUTH_TOKEN": "env-token"})  # fmt: skip
    text = "".join(served.banner)
    assert "approval mode read-only" in text and "HTTP" not in text
    assert "auth bearer token" in text


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("OMNI_NO_HTTP", "maybe", "$OMNI_NO_HTTP: expected true or false, not 'maybe'"),
        ("OMNI_GRPC_PORT", "many", "argument --grpc-port"),
        ("OMNI_CONFIG", "/nowhere.toml", "/nowhere.toml ($OMNI_CONFIG)"),
    ],
)
def test_a_bad_variable_is_a_usage_error_naming_it(variable: str, value: str, said: str) -> None:
    import os

    done = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "serve"],
        capture_output=True, text=True, timeout=60, env={**os.environ, variable: value},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert said in done.stderr, done.stderr
