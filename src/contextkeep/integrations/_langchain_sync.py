"""The blocking path of the LangChain middleware: the engine on a private loop, the model call at home.

LangChain's `agent.invoke` calls `wrap_model_call` in whatever thread runs the model node (in a
notebook, one whose event loop is already running). The async engine cannot run there, so it runs
on one private event loop in a daemon worker thread: a store's connections and locks then always
belong to the same loop. Each time the engine calls the model, the call is handed back to the
caller's thread, which runs LangChain's handler there (its callbacks, tracing and config context
as LangChain set them) and hands the result, or the error, back to the engine. Calls from several
threads share the worker: their engine steps take turns, their model calls run side by side.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

__all__ = ["EngineThread"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")
R = TypeVar("R")

_Job = tuple[Req, "asyncio.Future[Resp]"]


def _answer(answer: asyncio.Future[Resp], result: Resp) -> None:
    if not answer.done():  # done: the engine's coroutine was cancelled meanwhile
        answer.set_result(result)


def _fail(answer: asyncio.Future[Resp], error: Exception) -> None:
    if not answer.done():
        answer.set_exception(error)


class EngineThread(Generic[Req, Resp]):
    """A private event loop in a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="contextkeep-langchain", daemon=True
                )
                self._thread.start()
            return self._loop

    def run(
        self,
        work: Callable[[Callable[[Req], Awaitable[Resp]]], Awaitable[R]],
        call: Callable[[Req], Resp],
    ) -> R:
        """Run `work(model)` on the private loop; every `model(request)` it awaits runs `call` here.

        Blocks until `work` is done and returns its result (or raises its error).
        """
        loop = self._running()
        jobs: queue.SimpleQueue[_Job[Req, Resp] | None] = queue.SimpleQueue()

        async def model(request: Req) -> Resp:
            answer: asyncio.Future[Resp] = loop.create_future()
            jobs.put((request, answer))
            return await answer

        async def main() -> R:
            return await work(model)

        done = asyncio.run_coroutine_threadsafe(main(), loop)
        done.add_done_callback(lambda _: jobs.put(None))
        try:
            while (job := jobs.get()) is not None:
                request, answer = job
                try:
                    result = call(request)
                except Exception as error:
                    loop.call_soon_threadsafe(_fail, answer, error)
                else:
                    loop.call_soon_threadsafe(_answer, answer, result)
        finally:
            done.cancel()  # a no-op once done; on an interrupt here, the engine stops too
        return done.result()

    def close(self, last: Callable[[], Coroutine[Any, Any, object]] | None = None) -> None:
        """Run `last()` on the loop, if it runs, then stop it and its thread (a later `run` starts new ones).

        The loop stops also when `last` raises; its error is raised here.
        """
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            if last is not None:
                asyncio.run_coroutine_threadsafe(last(), loop).result()
        finally:
            asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
