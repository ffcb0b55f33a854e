"""A real Redis for the shared-limiter tests, and a TCP proxy in front of it whose link a test can cut.

The URL comes from SIMLAB_TEST_REDIS (`scripts/ensure-redis.sh` prints one; `.ci/run` exports it). Without it the
tests skip, unless CI is set: then they fail, as the PostgreSQL tests do.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from urllib.parse import urlsplit

import pytest

URL = os.environ.get("SIMLAB_TEST_REDIS")


def redis_url() -> str:
    """The test Redis's URL, checked to answer; skips (or, under CI, fails) without one."""
    if not URL:
        if os.environ.get("CI"):
            pytest.fail("SIMLAB_TEST_REDIS is not set: CI must start Redis (SIMLAB_TEST_REDIS=$(scripts/ensure-redis.sh))")
        pytest.skip("no Redis: set SIMLAB_TEST_REDIS to a server's URL (scripts/ensure-redis.sh starts one)")
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(URL, socket_timeout=2, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"SIMLAB_TEST_REDIS={URL} does not answer: {exc}")
    return URL


def unique_prefix(name: str) -> str:
    return f"simlab-test:{name}:{uuid.uuid4().hex[:8]}"


def client(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2, decode_responses=True)


def live_leases(r, prefix: str) -> dict[str, list[str]]:
    """The leases whose expiry is still ahead on Redis's clock, by class (what 'in flight' means in Redis)."""
    now = _redis_ms(r)
    return {kind: r.zrangebyscore(f"{prefix}:leases:{kind}", f"({now}", "+inf") for kind in ("interactive", "batch")}


def _redis_ms(r) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def drop_keys(r, prefix: str) -> None:
    keys = list(r.scan_iter(f"{prefix}:*"))
    if keys:
        r.delete(*keys)


class CuttableProxy:
    """127.0.0.1:<port> -> the Redis at `url`, on its own thread and loop. `cut()` resets every connection and
    refuses new ones; `stall()` keeps them open but drops every byte (a silent network); `restore()` undoes both."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.target = (parts.hostname, parts.port or 6379)
        self.db = parts.path or "/0"
        self.port = None
        self.stalled = False
        self._writers: set = set()
        self._server = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._do(self._listen())

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}{self.db}"

    def _do(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self):
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port or 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def pump(src, dst):
            try:
                while data := await src.read(65536):
                    if not self.stalled:
                        dst.write(data)
                        await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers.difference_update((writer, up_writer))

    async def _cut(self):
        self._server.close()
        for w in list(self._writers):
            w.transport.abort()  # a reset, as a dead server's host would answer
        self._writers.clear()
        await self._server.wait_closed()

    def cut(self) -> None:
        self._do(self._cut())

    def stall(self) -> None:
        self.stalled = True

    def restore(self) -> None:
        self.stalled = False
        if not self._server.is_serving():
            deadline = time.monotonic() + 5
            while True:  # the port was ours a moment ago; the kernel may hold it briefly
                try:
                    self._do(self._listen())
                    return
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def close(self) -> None:
        self._do(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
