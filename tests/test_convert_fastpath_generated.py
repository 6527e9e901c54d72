"""The fast path is generated code: the checked-in module is what the
generator writes for today's schema, and nothing in convert/ runs code
built from strings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from omni_grpc.convert import _fastpath, _fastpath_gen, _fastpath_tables
from omni_grpc.convert._fields import OptStr
from omni_grpc.convert._schema import PAYLOAD_BY_ARM, PAYLOAD_BY_TYPE, SERVER_EVENT_BY_TYPE

CONVERT = Path(_fastpath.__file__).parent


def test_checked_in_module_is_current() -> None:
    fresh = _fastpath_gen.render()
    current = _fastpath_gen.TARGET.read_text(encoding="utf-8")
    assert current == fresh, (
        f"{_fastpath_gen.TARGET.name} is stale: run {_fastpath_gen.COMMAND} and commit it"
    )
    assert _fastpath_gen.main(["--check"]) == 0


def test_a_schema_change_changes_the_generated_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The comparison above can fail: a new key is new code, and --check
    names the command to run."""
    spec = PAYLOAD_BY_TYPE["subagent"]
    monkeypatch.setattr(spec, "fields", [*spec.fields, OptStr("nickname")])
    fresh = _fastpath_gen.render()
    assert fresh != _fastpath_gen.TARGET.read_text(encoding="utf-8")
    assert 'if key == "nickname":' in fresh
    assert 'out["nickname"] = msg.nickname' in fresh
    assert _fastpath_gen.main(["--check"]) == 1
    assert _fastpath_gen.COMMAND in capsys.readouterr().err


def test_every_payload_arm_has_generated_functions() -> None:
    for spec in PAYLOAD_BY_ARM.values():
        decode = _fastpath_tables.decoder_for(spec)
        encode = _fastpath_tables.encoder_for(spec)
        assert decode.__module__ == encode.__module__ == "omni_grpc.convert._fastpath_generated"
        assert decode({"zz_unknown": 1}, []) is None
        if spec.type_text is not None:
            assert next(iter(encode(spec.message()).items())) == ("type", spec.type_text)


def test_a_spec_without_generated_code_is_named() -> None:
    spec = SERVER_EVENT_BY_TYPE["task_state"]  # server events take the general codec
    with pytest.raises(LookupError, match=_fastpath_gen.COMMAND):
        _fastpath_tables.decoder_for(spec)


def test_no_code_is_built_from_strings_in_convert() -> None:
    calls = []
    for path in sorted(CONVERT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("exec", "eval", "compile")
            ):
                calls.append(f"{path.name}:{node.lineno} {node.func.id}")
    assert calls == []
