"""A stand-in for the real engine in tests: an OpenAI-compatible streaming server (stdlib asyncio) that runs
simlab's own continuous-batching rules in real time (FIFO admission up to `max_seqs`, one prefill iteration,
one token per sequence per iteration, step = base + per_seq * sequences + per_token * prefill tokens (+ admit_ms
per admitted request); a request
joins the engine's queue `request_ms` after the server has read it, the front end handling one request at a
time, as the simulated backend assumes). With `scheduling="priority"` (vLLM's --scheduling-policy priority) the
engine's queue is ordered by the request's `priority` (lower first), then arrival; running requests are never
preempted (vLLM V1 preempts only when its KV cache runs out, which this stand-in has no limit on).

Only what `simlab.realcheck.client` uses: GET /health, GET /v1/models, POST /v1/completions with
`stream: true` and continuous usage stats. A closed connection aborts its request, as vLLM does.
"""

from __future__ import annotations

import asyncio
import json
import threading
from bisect import insort
from collections import deque


class FakeEngine:
    def __init__(self, base_ms=2.0, per_seq_ms=0.2, per_token_ms=0.01, max_seqs=16, request_ms=0.0, admit_ms=0.0,
                 model="fake", scheduling="fcfs"):
        if scheduling not in ("fcfs", "priority"):
            raise ValueError(f"scheduling must be 'fcfs' or 'priority', not {scheduling!r}")
        self.base_ms, self.per_seq_ms, self.per_token_ms, self.max_seqs = base_ms, per_seq_ms, per_token_ms, max_seqs
        self.request_ms, self.admit_ms, self.model, self.scheduling = request_ms, admit_ms, model, scheduling
        self.priorities: list[int] = []  # each completion request's `priority` (0 when absent), as received
        self.waiting: deque = deque()
        self.running: list = []
        self._wake: asyncio.Event | None = None
        self.requests = 0
        self.max_batch = 0

    async def _engine(self):
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
            prefill = admitted = 0
            while self.waiting and len(self.running) < self.max_seqs:
                r = self.waiting.popleft()
                if r["queue"] is None:
                    continue  # aborted while waiting
                r["new"] = True
                prefill += r["prompt"]
                admitted += 1
                self.running.append(r)
            self.max_batch = max(self.max_batch, len(self.running))
            n = len(self.running)
            await asyncio.sleep((self.base_ms + self.per_seq_ms * n + self.per_token_ms * prefill
                                 + self.admit_ms * admitted) / 1000)
            keep = []
            for r in self.running:
                if r["queue"] is None:
                    continue
                r["done"] += 1
                r["queue"].put_nowait(r["done"])
                if r["done"] < r["max"]:
                    keep.append(r)
            self.running = keep

    async def _handle(self, reader, writer):
        try:
            line = await reader.readline()
            method, path, _ = line.decode().split(" ", 2)
            headers = {}
            while (h := await reader.readline()) not in (b"\r\n", b""):
                k, _, v = h.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            if method == "GET":
                data = {"data": [{"id": self.model}]} if path == "/v1/models" else {}
                out = json.dumps(data).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(out) + out)
                await writer.drain()
                return
            req = json.loads(body)
            self.requests += 1
            priority = req.get("priority", 0)
            self.priorities.append(priority)
            r = {"prompt": len(req["prompt"]), "max": req["max_tokens"], "done": 0, "queue": asyncio.Queue(),
                 "order": (priority, self.requests)}
            if self.request_ms:
                async with self._front:
                    await asyncio.sleep(self.request_ms / 1000)
            if self.scheduling == "priority":
                insort(self.waiting, r, key=lambda x: x["order"])
            else:
                self.waiting.append(r)
            self._wake.set()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            try:
                while True:
                    n = await r["queue"].get()
                    usage = {"prompt_tokens": r["prompt"], "completion_tokens": n, "total_tokens": r["prompt"] + n}
                    msg = {"choices": [{"index": 0, "text": ""}], "usage": usage}
                    self._chunk(writer, b"data: " + json.dumps(msg).encode() + b"\n\n")
                    if n == r["max"]:
                        break
                    await writer.drain()
                self._chunk(writer, b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
                self._chunk(writer, b"data: [DONE]\n\n")
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            finally:
                r["queue"] = None
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _chunk(writer, data: bytes) -> None:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))

    async def serve(self, started: threading.Event, box: list, port: int = 0):
        self._wake = asyncio.Event()
        self._front = asyncio.Lock()
        engine = asyncio.ensure_future(self._engine())
        server = await asyncio.start_server(self._handle, "127.0.0.1", port, backlog=4096)
        box.append(server.sockets[0].getsockname()[1])
        box.append(asyncio.get_running_loop())
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            engine.cancel()
            server.close()


def start_in_thread(port: int = 0, **kw) -> tuple[str, FakeEngine, callable]:
    """Run a FakeEngine on a background thread; returns (URL, engine, stop)."""
    engine = FakeEngine(**kw)
    started, box = threading.Event(), []
    holder = {}

    def target():
        loop = asyncio.new_event_loop()
        holder["task"] = loop.create_task(engine.serve(started, box, port))
        try:
            loop.run_until_complete(holder["task"])
        except asyncio.CancelledError:
            pass
        finally:  # the handlers of connections still open end on this loop, not in the garbage collector
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    started.wait(10)

    def stop():
        box[1].call_soon_threadsafe(holder["task"].cancel)
        thread.join(10)

    return f"http://127.0.0.1:{box[0]}", engine, stop


def main(argv=None) -> int:
    """`python -m simlab.realcheck.fake_engine [--port P] [--seconds S]`: serve on 127.0.0.1 (prints the URL), for at
    most S seconds (default 600), e.g. to try `simlab loadtest` and `validate-real` without the real engine."""
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m simlab.realcheck.fake_engine", description=main.__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--seconds", type=float, default=600.0)
    for name, default in (("base-ms", 2.0), ("per-seq-ms", 0.2), ("per-token-ms", 0.01), ("request-ms", 0.0),
                          ("admit-ms", 0.0)):
        p.add_argument(f"--{name}", type=float, default=default)
    p.add_argument("--max-seqs", type=int, default=16)
    p.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    a = p.parse_args(argv)
    url, _, stop = start_in_thread(base_ms=a.base_ms, per_seq_ms=a.per_seq_ms, per_token_ms=a.per_token_ms,
                                   max_seqs=a.max_seqs, request_ms=a.request_ms, admit_ms=a.admit_ms, port=a.port,
                                   scheduling=a.scheduling_policy)
    print(url, flush=True)
    try:
        time.sleep(a.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
