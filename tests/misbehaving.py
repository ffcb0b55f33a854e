"""Tiny misbehaving HTTP servers for the tests of simlab.realcheck's limits (asyncio, loopback, random ports).

`serve(mode, host)` starts one on a background thread and returns (url, server, stop). `server.connections`
counts accepted connections. Modes (every request, unless the mode says otherwise):
- silent: accepts and reads, never answers;
- stall-headers: a 200 status line and headers (chunked), then nothing;
- endless-body: GET /v1/models answers 200 with an endless chunked body;
- models-not-json, models-empty, models-500, bad-chunk: GET /v1/models answered badly;
- stream-forever: /v1/models fine; completions stream event-stream comments forever (no token ever);
- endless-line: /v1/models fine; completions send one `data:` line that never ends;
- bad-event-json, too-many-tokens, completion-500: /v1/models fine; completions answered badly;
- count: /v1/models fine, completions answered 503 (for the URL tests: it only counts connections);
- drop-reused: a well-behaved server that keeps connections alive (HTTP/1.1, no `Connection: close`) and closes
  one without an answer when a further request arrives on it: what a server's keep-alive timeout does to a request
  sent on an idle connection at the moment it expires (uvicorn's, under vLLM, is 5 s).
"""

from __future__ import annotations

import asyncio
import json
import threading

MODELS = json.dumps({"data": [{"id": "mis"}]}).encode()


def _response(status: str, body: bytes, ctype: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Misbehaving:
    def __init__(self, mode: str):
        self.mode = mode
        self.connections = 0

    async def _handle(self, reader, writer):
        self.connections += 1
        try:
            line = await reader.readline()
            headers = {}
            while (h := await reader.readline()) not in (b"\r\n", b""):
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            body = b""
            if int(headers.get("content-length", 0)):
                body = await reader.readexactly(int(headers["content-length"]))
            models = b"/v1/models" in line
            if self.mode == "drop-reused":
                await self._keep_alive(models, body, reader, writer)
            else:
                await self._answer(models, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _keep_alive(self, models: bool, body: bytes, reader, w) -> None:
        if models:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                    % len(MODELS) + MODELS)
        else:
            n = json.loads(body)["max_tokens"]
            event = {"choices": [{"index": 0, "text": ""}], "usage": {"completion_tokens": n}}
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + _chunk(b"data: " + json.dumps(event).encode() + b"\n\n") + _chunk(b"data: [DONE]\n\n")
                    + b"0\r\n\r\n")
        await w.drain()
        await reader.read(1)  # a further request on this connection (or the client's close): closed unanswered

    async def _answer(self, models: bool, w) -> None:
        mode = self.mode
        if mode == "silent":
            await asyncio.sleep(3600)
        if mode == "stall-headers":
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            await w.drain()
            await asyncio.sleep(3600)
        if models:
            if mode == "endless-body":
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                block = _chunk(b"[" * 65536)
                while True:
                    w.write(block)
                    await w.drain()
            bad = {"models-not-json": _response("200 OK", b"<html>hello</html>", "text/html"),
                   "models-empty": _response("200 OK", b'{"object": "list", "data": []}'),
                   "models-500": _response("500 Internal Server Error", b'{"error": "boom"}'),
                   "bad-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"}
            w.write(bad.get(mode) or _response("200 OK", MODELS))
            await w.drain()
            return
        if mode in ("count", "completion-500"):
            w.write(_response("503 Service Unavailable" if mode == "count" else "500 Internal Server Error",
                              b'{"error": "no"}'))
            await w.drain()
            return
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        if mode == "stream-forever":
            while True:
                w.write(_chunk(b": still here\n\n"))
                await w.drain()
                await asyncio.sleep(0.01)
        if mode == "endless-line":
            w.write(_chunk(b"data: {\"choices\": [{\"text\": \""))
            while True:
                w.write(_chunk(b"x" * 65536))
                await w.drain()
        if mode == "bad-event-json":
            w.write(_chunk(b"data: {\"choices\": [{\"text\": \"\"}], \"usage\": {\"completion_tokens\": 1,\n\n"))
        if mode == "too-many-tokens":
            w.write(_chunk(b'data: {"choices": [{"text": ""}], "usage": {"completion_tokens": 9999}}\n\n'))
        await w.drain()
        await asyncio.sleep(3600)


def serve(mode: str, host: str = "127.0.0.1"):
    """A Misbehaving server on a background thread: (url, server, stop)."""
    server = Misbehaving(mode)
    ready, box = threading.Event(), {}

    def run():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)

        async def main():
            srv = await asyncio.start_server(server._handle, host, 0)
            box["port"] = srv.sockets[0].getsockname()[1]
            box["stop"] = asyncio.Event()
            ready.set()
            await box["stop"].wait()
            srv.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        box["loop"] = loop
        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)

    def stop():
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)

    return f"http://{host}:{box['port']}", server, stop
