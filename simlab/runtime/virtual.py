"""A virtual-time asyncio loop: `loop.time()` jumps to the next timer when nothing is ready to run.

For deterministic, fast tests and offline dry runs of simlab.runtime: `asyncio.sleep(0.25)` takes no wall time,
and the order of events depends only on the program. Real sockets still work (select is polled without waiting
while virtual time is advanced), but a program waiting only on I/O would spin: use it for timer-driven code.
"""

from __future__ import annotations

import asyncio


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        # Nothing runnable: jump to the earliest live timer, so the base loop finds it due and does not block.
        if not self._ready:
            scheduled = self._scheduled
            while scheduled and scheduled[0]._cancelled:
                scheduled[0]._scheduled = False
                import heapq

                heapq.heappop(scheduled)
                self._timer_cancelled_count = max(0, self._timer_cancelled_count - 1)
            if scheduled and scheduled[0]._when > self._virtual_now:
                self._virtual_now = scheduled[0]._when
        super()._run_once()


def run(coro):
    """`asyncio.run` on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        asyncio.set_event_loop(None)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
