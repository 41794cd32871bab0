"""The computations of the web server, bounded: at most ``workers`` run at once, whatever times out.

A request's computation (check, estimate, plan, export) runs in its own worker thread. A slot is
taken when the thread starts and freed only when the thread has really ended, so a request answered
504 keeps its slot until its computation is gone: the number of computations alive at once never
exceeds ``workers``, and neither does the memory they hold.

A computation whose request ran out of time (or whose server stops) is interrupted:
:class:`JobCancelled` is raised inside it at its next Python instruction (CPython's
``PyThreadState_SetAsyncExc``), which unwinds it (its temporary folder removed) within milliseconds
unless it is inside one long call into compiled code, which it finishes first (its slot stays taken
meanwhile). On an interpreter without that call the computation runs to its end, its slot taken.

A request that finds every slot taken waits for one, at most ``queue`` requests at once and within
its own time; any other is answered 503 at once with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: seconds between two looks for a free slot by a waiting request
POLL_S = 0.02
#: seconds a client is asked to wait before it tries again after a 503 (the ``Retry-After`` header)
RETRY_AFTER_S = 2


class JobCancelled(BaseException):
    """Raised inside a computation whose request ran out of time or whose server stops. A
    ``BaseException``, so that library code catching ``Exception`` lets it unwind the computation."""


def interrupt(thread: threading.Thread) -> bool:
    """Raise :class:`JobCancelled` in ``thread`` at its next Python instruction.

    Returns:
        True when it was raised; False when the thread has ended or the interpreter has no
        ``PyThreadState_SetAsyncExc`` (not CPython).
    """
    ident = thread.ident
    set_exc = getattr(getattr(ctypes, "pythonapi", None), "PyThreadState_SetAsyncExc", None)
    if ident is None or set_exc is None or not thread.is_alive():
        return False
    hit = set_exc(ctypes.c_ulong(ident), ctypes.py_object(JobCancelled))
    if hit > 1:  # never expected: undo rather than interrupt another thread
        set_exc(ctypes.c_ulong(ident), None)
        return False
    return hit == 1


class _Job:
    """One computation: its thread (not started), the future its request awaits, whether it still
    computes."""

    def __init__(self, work: Callable[[], tuple[str, Any]], loop: asyncio.AbstractEventLoop):
        self.future: asyncio.Future = loop.create_future()
        self.computing = True
        self.thread = threading.Thread(target=_compute, args=(self, work, loop), daemon=True, name="moeplan-job")


def _deliver(future: asyncio.Future, outcome: tuple[str, Any]) -> None:
    if not future.done():
        future.set_result(outcome)


@dataclass
class Pool:
    """The bounded set of computations of one application.

    Args:
        workers: computations alive at once (threads started and not ended), at least 1.
        queue: requests that may wait for a slot at once (more are refused: :meth:`acquire` False).
    """

    workers: int
    queue: int
    jobs: list[_Job] = field(default_factory=list)
    waiting: int = 0
    closing: bool = False
    #: the most computations seen alive at once (for tests and the load fuzzer)
    peak: int = 0

    def alive(self) -> int:
        """Computations whose thread has not ended (ended ones are forgotten here)."""
        self.jobs = [j for j in self.jobs if j.thread.is_alive()]
        return len(self.jobs)

    async def acquire(self, deadline: float) -> bool:
        """Wait for a free slot until ``deadline`` (event-loop time). False when the server stops,
        the wait would exceed ``queue`` waiting requests, or the deadline passes. The caller must
        start its computation (:meth:`start`) before its next ``await``."""
        loop = asyncio.get_running_loop()
        if self.closing:
            return False
        if self.waiting == 0 and self.alive() < self.workers:
            return True
        if self.waiting >= self.queue and self.alive() >= self.workers:
            return False
        self.waiting += 1
        try:
            while self.alive() >= self.workers:
                if self.closing or loop.time() >= deadline:
                    return False
                await asyncio.sleep(POLL_S)
            return not self.closing
        finally:
            self.waiting -= 1

    def start(self, work: Callable[[], tuple[str, Any]]) -> _Job:
        """Run ``work()`` in a new daemon thread (it takes a slot until it ends); its outcome, or
        ``("bug", exception)``, becomes the job's future's result."""
        job = _Job(work, asyncio.get_running_loop())
        self.jobs.append(job)
        job.thread.start()
        self.peak = max(self.peak, self.alive())
        return job

    def cancel(self, job: _Job) -> None:
        """Interrupt ``job`` if it still computes (its slot is freed when its thread has ended)."""
        if job.computing:
            interrupt(job.thread)

    def close(self) -> None:
        """The server stops: refuse new computations, answer every waiting request and interrupt
        every computation."""
        self.closing = True
        for job in list(self.jobs):
            _deliver(job.future, ("closing", None))
            self.cancel(job)


def _compute(job: _Job, work: Callable[[], tuple[str, Any]], loop: asyncio.AbstractEventLoop) -> None:
    """The body of a job's thread: ``work()``, then its outcome handed to the event loop."""
    try:
        try:
            outcome: tuple[str, Any] = work()
        except Exception as exc:  # noqa: BLE001 - handed to the request, answered 500 and logged
            outcome = ("bug", exc)
        finally:
            job.computing = False
        loop.call_soon_threadsafe(_deliver, job.future, outcome)
    except JobCancelled:
        return  # its request was answered already
    except RuntimeError:
        return  # the event loop is closed: the server has stopped


__all__ = ["POLL_S", "RETRY_AFTER_S", "JobCancelled", "Pool", "interrupt"]
