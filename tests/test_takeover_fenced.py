"""A take-over's close fenced by another take-over of the same run (#40 item 2).

Under load a close's lease can lapse while it reads the dead owner's trace;
another replica's sweep then takes the run over, and the first close is
fenced. That close is not a failure to retry (the other replica's close ends
the run): it is logged as a warning, without a traceback, and not put off
for a retry; any other failure still is.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.errors import Fenced
from omni_grpc.runtime.hub import Hub


async def test_a_close_fenced_by_another_take_over_is_left_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    hub = Hub(DemoEngine(), tmp_path / "data")
    recovery = hub.recovery
    failure: Exception = Fenced("s1", 4)

    async def close_orphan(session_id: str, beat: int | None = None) -> None:
        raise failure

    monkeypatch.setattr(recovery, "close_orphan", close_orphan)
    with caplog.at_level(logging.WARNING):
        await recovery._close_one("s1", 3, 0)
    assert "s1" not in recovery._backoff
    assert [r.levelno for r in caplog.records] == [logging.WARNING], caplog.text
    assert "taken over from this close" in caplog.text
    assert caplog.records[0].exc_info is None

    caplog.clear()
    failure = RuntimeError("a bug")
    with caplog.at_level(logging.WARNING):
        await recovery._close_one("s1", 3, 0)
    assert "s1" in recovery._backoff  # tried again later
    assert [r.levelno for r in caplog.records] == [logging.ERROR], caplog.text
