"""The store writer thread's scheduling policy (Linux ``SCHED_IDLE`` while no backlog is queued)."""

from __future__ import annotations

import os


class IdlePolicy:
    """Switches the calling thread between Linux's ``SCHED_IDLE`` policy and the normal one.

    Idle while the writer's queue holds less than a batch: then a request that wakes the
    event loop preempts the writer at once, where a normal (or niced) thread sharing the
    loop's core may first finish its time slice (``python -m bench.tail_latency --variants
    base,normal-writer,no-store-db --rounds 6``, pass-through at concurrency 1 on one core:
    the loop's wait for the CPU 63 -> 20 us per request, p99 2.82 -> 2.57 ms, against 1.69 ms
    without database writes; docs/BENCHMARKS.md). Normal under a backlog, so that a saturated
    gateway cannot starve the writer.

    Args:
        enabled: the ``store_writer_idle`` setting; off (or an OS without ``SCHED_IDLE``, or
            a refused system call) makes :meth:`set` a no-op.
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled and hasattr(os, "SCHED_IDLE")
        self.idle: bool | None = None  # the thread's policy as last set (None: untouched)

    def set(self, idle: bool) -> None:
        """Put the calling thread under ``SCHED_IDLE`` (``idle``) or the normal policy."""
        if not self.enabled or idle == self.idle:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))
            self.idle = idle
        except OSError:  # not permitted here (e.g. a seccomp profile): keep the normal policy
            self.enabled = False
