"""Micro-batching of concurrent requests: the queries that arrive for one pipeline while it is busy (or
within a bounded wait of the first) run through it as one query frame, so that every stage sees them
together - the dense encoder encodes all their queries in one batch, BM25 scores them in one call.

A bounded queue refuses work it could not start in time (:class:`OverloadedError`: HTTP 503 with
Retry-After), every request carries a deadline (:class:`DeadlineExceededError`: 504), and :meth:`close`
lets the batches already taken finish.  Pipelines run on a small thread pool (one batch of a pipeline
at a time), never on the event loop.  A request fails alone: when a batch's call fails, each request of
the batch runs again on its own, so only the one whose queries make the pipeline fail gets the error.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import pandas as pd

from pyterrier_sci.errors import (  # noqa: F401 - defined there, re-exported
    DeadlineExceededError,
    OverloadedError,
    ShuttingDownError,
)

__all__ = ["MicroBatcher", "OverloadedError", "DeadlineExceededError", "ShuttingDownError", "BatchStats"]


@dataclass
class _Item:
    queries: List[str]
    future: asyncio.Future
    deadline: float


@dataclass
class BatchStats:
    """Counters: batches run, queries run, the largest batch, requests refused and expired."""
    batches: int = 0
    queries: int = 0
    largest: int = 0
    refused: int = 0
    expired: int = 0
    retried: int = 0     # failed batches whose requests ran again one by one
    failed: int = 0      # requests whose own call failed
    seconds: float = 0.0
    sizes: Dict[int, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"batches": self.batches, "queries": self.queries, "largest_batch": self.largest,
                "refused": self.refused, "expired": self.expired, "retried": self.retried, "failed": self.failed,
                "mean_batch": round(self.queries / self.batches, 3) if self.batches else 0.0,
                "batch_seconds": round(self.seconds, 3)}


class MicroBatcher:
    """Runs ``run(name, queries) -> [result frame per query]`` for concurrent callers, batching by name.

    Args:
        run: runs a pipeline on a list of queries, returns one frame per query (in order); called on
            the thread pool.
        max_batch: the most queries in one pipeline call.
        max_wait: seconds a batch waits for more queries after its first one (0: only those already queued).
        max_queue: the most queries waiting (not yet running), over all pipelines; more is :class:`OverloadedError`.
        workers: threads running pipeline calls (different pipelines may run side by side).
    """

    def __init__(self, run: Callable[[str, List[str]], List[pd.DataFrame]], max_batch: int = 32,
                 max_wait: float = 0.002, max_queue: int = 256, workers: int = 1):
        self.run, self.max_batch, self.max_wait, self.max_queue = run, max_batch, max_wait, max_queue
        self.workers = workers
        self.stats = BatchStats()
        self._queues: Dict[str, asyncio.Queue] = {}
        self._tasks: Dict[str, asyncio.Task] = {}
        self._executor: Optional[ThreadPoolExecutor] = None
        self._waiting = 0      # queries queued, not yet taken into a batch
        self._running = 0      # batches running
        self._closing = False
        self._mean_batch_seconds = 0.05
        self._calls = 0        # pipeline calls running on the threads (a call outlives a cancelled waiter)
        self._calls_lock = threading.Lock()

    @property
    def calls_running(self) -> int:
        """Pipeline calls running now on the threads (one left running past :meth:`close` included)."""
        return self._calls

    def _call(self, name: str, queries: List[str]) -> List[pd.DataFrame]:
        with self._calls_lock:
            self._calls += 1
        try:
            return self.run(name, queries)
        finally:
            with self._calls_lock:
                self._calls -= 1

    @property
    def waiting(self) -> int:
        return self._waiting

    def retry_after(self) -> int:
        """Seconds until the queue has likely drained (at least 1)."""
        batches = math.ceil(max(self._waiting, 1) / self.max_batch)
        return max(1, math.ceil(batches * self._mean_batch_seconds))

    async def submit(self, name: str, queries: Sequence[str], deadline: float) -> List[pd.DataFrame]:
        """Queues ``queries`` for pipeline ``name``; waits (at most until ``deadline``, a
        ``time.monotonic()`` value) for their result frames."""
        if self._closing:
            raise ShuttingDownError("the server is shutting down")
        queries = list(queries)
        if self._waiting + len(queries) > self.max_queue:
            self.stats.refused += 1
            raise OverloadedError(self.retry_after())
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="pyterrier-sci-serve")
        if name not in self._queues:
            self._queues[name] = asyncio.Queue()
            self._tasks[name] = loop.create_task(self._worker(name))
        item = _Item(queries, loop.create_future(), deadline)
        self._waiting += len(queries)
        self._queues[name].put_nowait(item)
        try:
            return await asyncio.wait_for(asyncio.shield(item.future), timeout=max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            self.stats.expired += 1
            raise DeadlineExceededError(f"the request's deadline passed ({len(queries)} quer"
                                   f"{'y' if len(queries) == 1 else 'ies'} waiting or running)") from None

    async def _worker(self, name: str) -> None:
        queue = self._queues[name]
        loop = asyncio.get_running_loop()
        carry: Optional[_Item] = None   # an item too big to join the previous batch
        while True:
            first, carry = (carry, None) if carry is not None else (await queue.get(), None)
            if first is None:
                return
            batch, size = [first], len(first.queries)
            # what is queued already, then up to max_wait for more
            end = time.monotonic() + self.max_wait
            stop = False
            while size < self.max_batch:
                try:
                    nxt = queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        nxt = await asyncio.wait_for(queue.get(), timeout=left)
                    except asyncio.TimeoutError:
                        break
                if nxt is None:
                    stop = True
                    break
                if size + len(nxt.queries) > self.max_batch and size > 0:
                    carry = nxt  # too big to join: first in the next batch
                    break
                batch.append(nxt)
                size += len(nxt.queries)
            self._waiting -= size  # (a carried item is still waiting)
            now = time.monotonic()
            live = [it for it in batch if not it.future.done() and it.deadline > now]
            for it in batch:
                if it not in live and not it.future.done():
                    it.future.set_exception(DeadlineExceededError("the request's deadline passed while it was queued"))
            if live:
                await self._run_batch(loop, name, live)
            if stop:
                return

    async def _call_timed(self, loop, name: str, queries: List[str]) -> List[pd.DataFrame]:
        self._running += 1
        start = time.perf_counter()
        try:
            return await loop.run_in_executor(self._executor, self._call, name, queries)
        finally:
            self._running -= 1
            took = time.perf_counter() - start
            self._mean_batch_seconds = 0.8 * self._mean_batch_seconds + 0.2 * took
            self.stats.batches += 1
            self.stats.queries += len(queries)
            self.stats.largest = max(self.stats.largest, len(queries))
            self.stats.seconds += took

    async def _run_batch(self, loop, name: str, items: List[_Item]) -> None:
        queries = [q for it in items for q in it.queries]
        try:
            frames = await self._call_timed(loop, name, queries)
        except Exception as e:
            if len(items) == 1:
                self.stats.failed += 1
                if not items[0].future.done():
                    items[0].future.set_exception(e)
                return
            # one request may have made the whole call fail: each runs again alone, so that only its own
            # caller learns the failure and the others get what they would have got alone
            self.stats.retried += 1
            for it in items:
                if it.future.done():
                    continue
                if it.deadline <= time.monotonic():
                    it.future.set_exception(DeadlineExceededError("the request's deadline passed while its batch "
                                                                  "was run again request by request"))
                    continue
                await self._run_batch(loop, name, [it])
            return
        pos = 0
        for it in items:
            part = frames[pos:pos + len(it.queries)]
            pos += len(it.queries)
            if not it.future.done():
                it.future.set_result(part)

    async def close(self, timeout: float = 30.0) -> None:
        """Takes no new work; lets what is queued and running finish (at most ``timeout`` seconds)."""
        self._closing = True
        for q in self._queues.values():
            q.put_nowait(None)
        tasks = list(self._tasks.values())
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                t.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
