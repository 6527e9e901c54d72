"""The openai engine obeys an endpoint's Retry-After (and retry-after-ms), up
to retry_after_max_ms, against the local OpenAI-compatible fake sending it.

A wait of a minute is seen through the engine's ``pause`` (a recorder that
returns at once); a short one is waited for real and read off the fake's
request arrival times, and an abort cuts a long real one short.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakes.harness import collect, payloads
from fakes.openai_server import FakeOpenAI, error_reply, text_reply
from hypothesis import given
from hypothesis import strategies as st

from omni_grpc.engines.base import AbortSignal
from omni_grpc.engines.openai import OpenAIConfig, OpenAIEngine
from omni_grpc.engines.openai.transport import retry_after
from omni_grpc.protocol import builders as b


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


class Pauses:
    """An engine ``pause`` that records each wait asked for and returns at once."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float, abort: AbortSignal) -> bool:
        self.asked.append(seconds)
        return False


def engine_for(fake: FakeOpenAI, pause: Pauses | None = None, **opts: str) -> OpenAIEngine:
    options = {"base_url": fake.base_url, "model": "fake-model", "api_key": "sk-test",
               "retry_base_ms": "10", **opts}  # fmt: skip
    return OpenAIEngine(OpenAIConfig.from_options(options, env={}), pause=pause)


async def test_a_429_with_retry_after_60_waits_a_minute_and_says_so(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(error_reply(429, "slow down", {"Retry-After": "60"}), text_reply("ok"))
    pauses = Pauses()
    out = await collect(engine_for(fake, pauses), [b.user_text("hi")], workspace=tmp_path)
    first, second = payloads(out, "request_end")
    assert first == {
        "type": "request_end", "status": "failed", "attempt": 1, "retry_in_ms": 60000,
        "error_message": "429 slow down (the endpoint asked to wait 60 s)",
    }  # fmt: skip
    assert second["status"] == "completed"
    assert pauses.asked == [60.0]  # not the 10 ms backoff
    assert len(fake.requests) == 2


async def test_a_503_with_an_http_date_waits_until_then(fake: FakeOpenAI, tmp_path: Path) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    fake.script(error_reply(503, "busy", {"Retry-After": when}), text_reply("ok"))
    pauses = Pauses()
    out = await collect(engine_for(fake, pauses), [b.user_text("hi")], workspace=tmp_path)
    end = payloads(out, "request_end")[0]
    # An HTTP-date has whole seconds and the request took some time: 28-30 s.
    assert 28_000 <= end["retry_in_ms"] <= 30_000
    assert pauses.asked == [end["retry_in_ms"] / 1000]
    assert end["error_message"].startswith("503 busy (the endpoint asked to wait 2")


async def test_retry_after_ms_wins_and_is_waited_for_real(fake: FakeOpenAI, tmp_path: Path) -> None:
    # The real pause: the second request comes no sooner than asked.
    headers = {"retry-after-ms": "400", "Retry-After": "60"}
    fake.script(error_reply(429, "slow down", headers), text_reply("ok"))
    out = await collect(engine_for(fake), [b.user_text("hi")], workspace=tmp_path)
    assert payloads(out, "request_end")[0]["retry_in_ms"] == 400
    first, second = fake.requests
    assert second.at - first.at >= 0.4


async def test_a_longer_retry_after_is_cut_to_the_cap_and_says_so(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(error_reply(429, "later", {"Retry-After": "3600"}),
                error_reply(429, "later", {"Retry-After": "3600"}), text_reply("ok"))  # fmt: skip
    pauses = Pauses()
    engine = engine_for(fake, pauses, retry_after_max_ms="5000")
    out = await collect(engine, [b.user_text("hi")], workspace=tmp_path)
    ends = payloads(out, "request_end")
    assert [e.get("retry_in_ms") for e in ends] == [5000, 5000, None]
    assert ends[0]["error_message"] == (
        "429 later (the endpoint asked to wait 3600 s; waiting at most retry_after_max_ms, 5 s)"
    )
    assert pauses.asked == [5.0, 5.0]


@pytest.mark.parametrize("value", ["soon", "-5", "1.5e400", ""])
async def test_a_retry_after_that_says_nothing_leaves_the_backoff(
    fake: FakeOpenAI, tmp_path: Path, value: str
) -> None:
    fake.script(error_reply(503, "busy", {"Retry-After": value}), text_reply("ok"))
    pauses = Pauses()
    out = await collect(engine_for(fake, pauses), [b.user_text("hi")], workspace=tmp_path)
    end = payloads(out, "request_end")[0]
    assert (end["retry_in_ms"], end["error_message"]) == (10, "503 busy")
    assert pauses.asked == [0.01]


async def test_a_bad_request_is_not_retried_whatever_retry_after_says(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(error_reply(400, "bad", {"Retry-After": "1"}), text_reply("never"))
    pauses = Pauses()
    out = await collect(engine_for(fake, pauses), [b.user_text("hi")], workspace=tmp_path)
    assert "retry_in_ms" not in payloads(out, "request_end")[0]
    assert pauses.asked == [] and len(fake.requests) == 1


async def test_an_abort_ends_a_long_retry_after_wait_at_once(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(error_reply(429, "slow down", {"Retry-After": "60"}), text_reply("never"))
    abort = AbortSignal()

    def on_message(message: dict[str, object]) -> None:
        payload = message["payload"]
        if isinstance(payload, dict) and payload.get("retry_in_ms") == 60000:
            abort.set("stop")

    # The real pause; the bound is far below the minute it was asked to wait.
    out = await asyncio.wait_for(
        collect(engine_for(fake), [b.user_text("hi")], workspace=tmp_path, abort=abort,
                on_message=on_message),
        timeout=30,
    )  # fmt: skip
    assert out[-1]["payload"]["type"] == "abort"
    assert len(fake.requests) == 1


def headers(**values: str) -> httpx.Headers:
    return httpx.Headers({k.replace("_", "-"): v for k, v in values.items()})


@given(st.integers(min_value=0, max_value=10**9))
def test_delay_seconds_are_read_as_given(seconds: int) -> None:
    assert retry_after(headers(retry_after=str(seconds))) == seconds


@given(
    st.integers(min_value=0, max_value=2**40).map(float),
    st.floats(min_value=0, max_value=1e12, allow_nan=False),
)
def test_retry_after_ms_is_milliseconds(ms: float, other: float) -> None:
    assert retry_after(headers(retry_after_ms=repr(ms), retry_after=f"{other:.0f}")) == ms / 1000


@given(
    st.integers(min_value=0, max_value=10**6),
    st.datetimes(min_value=datetime.datetime(1990, 1, 1), max_value=datetime.datetime(2200, 1, 1)),
)
def test_an_http_date_is_the_time_until_it(ahead: int, now: datetime.datetime) -> None:
    start = now.replace(tzinfo=datetime.UTC, microsecond=0).timestamp()
    when = email.utils.formatdate(start + ahead, usegmt=True)
    assert retry_after(headers(retry_after=when), now=lambda: start) == ahead
    # A date already past asks for no wait at all.
    assert retry_after(headers(retry_after=when), now=lambda: start + ahead + 5) == 0.0
