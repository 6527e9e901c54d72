"""Calling a grpc.aio method behavior whatever its shape, for interceptors.

grpc.aio takes three shapes of behavior, and a server mixes them: our
AgentService streams with async generators, grpcio-health's ``Watch`` is a
coroutine that sends with ``context.write``, and a plain function runs on the
default executor (a unary one returns its response, a streaming one returns an
iterator; request streams reach it as a blocking iterator). An interceptor that
wraps a handler must call each the way grpc itself would, or the wrapped
method fails with a ``TypeError`` for one shape. These helpers do, so each
interceptor writes its wrapper once for all shapes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import grpc

Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]

_END = object()


def is_sync(behavior: Behavior) -> bool:
    """True for a plain function (grpc.aio runs it on an executor thread)."""
    return not (
        inspect.iscoroutinefunction(behavior)
        or inspect.isasyncgenfunction(behavior)
        or inspect.isawaitable(behavior)
    )


def requests_for(behavior: Behavior, requests: Any) -> Any:
    """A request stream in the form ``behavior`` reads: as is for an async
    behavior, a blocking iterator (fed from the loop) for a sync one."""
    if not is_sync(behavior) or not hasattr(requests, "__aiter__"):
        return requests
    return _BlockingRequests(requests, asyncio.get_running_loop())


async def unary_response(behavior: Behavior, request: Any, context: Any) -> Any:
    """The one response of a unary-response behavior."""
    if is_sync(behavior):
        return await asyncio.get_running_loop().run_in_executor(None, behavior, request, context)
    return await behavior(request, context)


def stream_responses(behavior: Behavior, request: Any, context: Any) -> AsyncGenerator[Any, None]:
    """The responses a streaming behavior yields or returns. A coroutine sends
    its own through ``context.write`` (so a wrapper passes a counting context
    to see them) and yields nothing here. The request is not held once handed
    to an async behavior (``released_request``: it may be megabytes).

    An async generator behavior's own generator is returned as it is, not
    wrapped in one more: each layer of async generators costs every event of
    a stream a resumption (three interceptors called this per Run event)."""
    if inspect.isasyncgenfunction(behavior):
        responses: AsyncGenerator[Any, None] = behavior(request, context)
        return responses
    return _other_responses(behavior, request, context)


async def _other_responses(
    behavior: Behavior, request: Any, context: Any
) -> AsyncGenerator[Any, None]:
    """``stream_responses`` of a coroutine or a plain function."""
    if not is_sync(behavior):
        done = behavior(request, context)
        del request
        await done
        return
    loop = asyncio.get_running_loop()
    responses = await loop.run_in_executor(None, behavior, request, context)
    if responses is None:
        return
    iterator = iter(responses)
    while (response := await loop.run_in_executor(None, next, iterator, _END)) is not _END:
        yield response


class _BlockingRequests(Iterator[Any]):
    """An async request stream read from an executor thread, one at a time."""

    def __init__(self, requests: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._requests = requests.__aiter__()
        self._loop = loop

    def __next__(self) -> Any:
        future = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
        item = future.result()
        if item is _END:
            raise StopIteration
        return item

    async def _next(self) -> Any:
        try:
            return await self._requests.__anext__()
        except StopAsyncIteration:
            return _END
