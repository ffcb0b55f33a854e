"""One HTTP/1.1 exchange with a checked loopback server, every wait and every read bounded.

The bytes are parsed by h11 (status line, headers, chunked or fixed-length or read-to-close bodies; a malformed
response is a protocol error, not a guess); the socket, the clock and the limits are ours:
- time: the connection within `connect_s`, the status line and headers within `header_s`, each read of the body
  within `idle_s`, and the whole exchange before the caller's deadline (loop clock, seconds);
- size: the status line and headers at most `header_bytes`, each body read at most 64 KiB; what a caller keeps
  of a body it caps itself (`read_body(cap)`; the event-stream parser caps each line).
Every failure is a ServerError (an InputError: exit 2) naming the server and the request, never a traceback.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import h11

from simlab.errors import InputError
from simlab.realcheck.urls import Target

READ_BYTES = 65536


class ServerError(InputError):
    """The server's answer was not what the protocol promises (or did not come in time)."""

    def __init__(self, server: str, request: str, message: str):
        super().__init__(server, request, message)

    def __reduce__(self):
        return (type(self), (self.source, self.where, self.message))


@dataclass(frozen=True)
class Limits:
    connect_s: float = 10.0
    header_s: float = 60.0
    idle_s: float = 60.0
    header_bytes: int = 64 * 1024
    json_bytes: int = 1 << 20  # a JSON answer (GET /v1/models)
    line_bytes: int = 64 * 1024  # one event-stream line

    @classmethod
    def within(cls, seconds: float) -> "Limits":
        """Every wait at most `seconds` (the command's --max-seconds), the connection at most 10 s of it."""
        return cls(connect_s=min(10.0, seconds), header_s=seconds, idle_s=seconds)


class Exchange:
    """A request sent; `await start()` reads the status and headers, then `chunks()` the body as it arrives."""

    def __init__(self, target: Target, method: str, path: str, body: bytes | None, limits: Limits,
                 deadline: float | None):
        self.target, self.method, self.path, self.body = target, method, target.path + path, body
        self.limits, self.deadline = limits, deadline
        self.what = f"{method} {self.path}"
        self.status = 0
        self.headers: dict[str, str] = {}
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=limits.header_bytes)
        self._reader = self._writer = None

    def fail(self, message: str) -> ServerError:
        return ServerError(f"server {self.target.url}", f"response to {self.what}", message)

    def _left(self, phase_s: float) -> float:
        if self.deadline is None:
            return phase_s
        return max(0.0, min(phase_s, self.deadline - asyncio.get_running_loop().time()))

    async def _wait(self, awaitable, phase_s: float, phase: str):
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation from outside (the run's
        # end) when the read it wraps completes at the same moment, and a stream that keeps sending never stops.
        left = self._left(phase_s)
        try:
            async with asyncio.timeout(left):
                return await awaitable
        except TimeoutError:
            raise self.fail(f"no {phase} within {left:.3g} s") from None

    async def start(self) -> "Exchange":
        t = self.target
        try:
            self._reader, self._writer = await self._wait(
                asyncio.open_connection(t.address, t.port, family=t.family, limit=READ_BYTES), self.limits.connect_s,
                "connection")
        except OSError as exc:
            raise self.fail(f"cannot connect ({exc.strerror or exc})") from None
        headers = [("Host", t.netloc), ("Connection", "close"), ("Accept", "application/json, text/event-stream")]
        if self.body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(self.body)))]
        out = self._conn.send(h11.Request(method=self.method, target=self.path, headers=headers))
        if self.body is not None:
            out += self._conn.send(h11.Data(data=self.body))
        out += self._conn.send(h11.EndOfMessage())
        try:
            self._writer.write(out)
            await self._wait(self._writer.drain(), self.limits.header_s, "acceptance of the request")
        except OSError as exc:
            self.close()
            raise self.fail(f"the connection failed while sending ({exc.strerror or exc})") from None
        event = await self._next(self.limits.header_s, "status line and headers")
        if not isinstance(event, h11.Response):
            self.close()
            raise self.fail(f"expected a status line and headers, the connection gave {type(event).__name__}")
        self.status = event.status_code
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        return self

    async def _next(self, phase_s: float, phase: str):
        while True:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                self.close()
                raise self.fail(f"malformed HTTP ({exc})") from None
            if event is not h11.NEED_DATA:
                if isinstance(event, h11.InformationalResponse):
                    continue  # 100 Continue and the like: the real answer follows
                return event
            try:
                data = await self._wait(self._reader.read(READ_BYTES), phase_s, phase)
            except OSError as exc:
                self.close()
                raise self.fail(f"the connection failed ({exc.strerror or exc})") from None
            except ServerError:
                self.close()
                raise
            self._conn.receive_data(data)  # b"": the server closed; h11 decides whether that ends the message

    async def chunks(self):
        """The body's bytes as they arrive, until the end of the message."""
        while True:
            event = await self._next(self.limits.idle_s, "further body data")
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:  # ConnectionClosed before the end: h11 raises for a short body, so this is a bare close
                raise self.fail("the connection closed before the end of the response")

    async def read_body(self, cap: int) -> bytes:
        """The whole body, refused beyond `cap` bytes."""
        parts, size = [], 0
        async for data in self.chunks():
            size += len(data)
            if size > cap:
                raise self.fail(f"a body larger than {cap:,} bytes (expected a small JSON document)")
            parts.append(data)
        return b"".join(parts)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


async def exchange(target: Target, method: str, path: str, body: bytes | None, limits: Limits,
                   deadline: float | None = None) -> Exchange:
    return await Exchange(target, method, path, body, limits, deadline).start()
