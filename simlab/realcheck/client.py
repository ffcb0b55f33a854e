"""A small streaming client for an OpenAI-compatible `/v1/completions` server on this machine (stdlib only).

Prompts go as token ids (the real-engine server runs without a tokenizer); `ignore_eos` and `max_tokens` fix
the output length. Every streamed chunk is timed on arrival (loop clock, ms), with the server's running count of
completion tokens (`continuous_usage_stats`), so a response gives its time to first token and per-token gaps.
Loopback only: load is never sent anywhere else.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from simlab.errors import InputError


def loopback_url(url: str, what: str = "URL") -> tuple[str, int, str]:
    """(host, port, base path) of an http:// URL on the loopback interface; InputError otherwise."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise InputError(None, what, f"expected an http:// URL of a server on this machine (found {url!r})")
    host = parts.hostname or ""
    ok = host == "localhost"
    if not ok:
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = False
    if not ok:
        raise InputError(None, what, f"refusing to send load to {host!r}: only loopback hosts (127.0.0.0/8, ::1, "
                                     "localhost) are allowed")
    return host, parts.port or 80, parts.path.rstrip("/")


@dataclass
class Completion:
    """One request's timeline (loop clock, ms)."""

    sent_ms: float
    first_ms: float | None = None
    end_ms: float | None = None
    chunk_ms: list[float] = field(default_factory=list)  # arrival of each chunk that carried tokens
    chunk_tokens: list[int] = field(default_factory=list)  # completion tokens so far, after each such chunk
    output_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_ms is None else self.first_ms - self.sent_ms

    @property
    def latency_ms(self) -> float | None:
        return None if self.end_ms is None else self.end_ms - self.sent_ms


class ServerError(RuntimeError):
    pass


class Client:
    def __init__(self, url: str, model: str | None = None, timeout_s: float = 600.0):
        self.host, self.port, self.base = loopback_url(url)
        self.model = model
        self.timeout_s = timeout_s

    async def _request(self, method: str, path: str, body: bytes | None = None):
        reader, writer = await asyncio.open_connection(self.host, self.port)
        head = [f"{method} {self.base}{path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Connection: close"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
        await writer.drain()
        status_line = await reader.readline()
        try:
            status = int(status_line.split()[1])
        except (IndexError, ValueError):
            writer.close()
            raise ServerError(f"bad HTTP response from {self.host}:{self.port}: {status_line[:80]!r}") from None
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers, reader, writer

    @staticmethod
    async def _body_chunks(headers, reader):
        """The body as it arrives (chunked transfer encoding or plain)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = await reader.readexactly(size)
                await reader.readline()
                yield data
        elif "content-length" in headers:
            yield await reader.readexactly(int(headers["content-length"]))
        else:
            while data := await reader.read(65536):
                yield data

    async def get_json(self, path: str):
        status, headers, reader, writer = await self._request("GET", path)
        try:
            body = b"".join([c async for c in self._body_chunks(headers, reader)])
        finally:
            writer.close()
        if status != 200:
            raise ServerError(f"GET {path}: HTTP {status}: {body[:200]!r}")
        return json.loads(body) if body.strip() else None

    async def model_name(self) -> str:
        if self.model is None:
            data = await self.get_json("/v1/models")
            self.model = data["data"][0]["id"]
        return self.model

    async def complete(self, prompt_tokens: int, output_tokens: int, token: int = 100) -> Completion:
        """Stream one completion of exactly `output_tokens` tokens for a prompt of `prompt_tokens` token ids."""
        loop = asyncio.get_running_loop()
        model = await self.model_name()
        body = json.dumps({
            "model": model, "prompt": [token + (i % 1000) for i in range(prompt_tokens)],
            "max_tokens": output_tokens, "min_tokens": output_tokens, "ignore_eos": True, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }).encode()
        done = Completion(sent_ms=loop.time() * 1000.0, prompt_tokens=prompt_tokens)
        status, headers, reader, writer = await asyncio.wait_for(self._request("POST", "/v1/completions", body),
                                                                 self.timeout_s)
        try:
            if status != 200:
                text = b"".join([c async for c in self._body_chunks(headers, reader)])
                raise ServerError(f"POST /v1/completions: HTTP {status}: {text[:300]!r}")
            buf = b""
            async for data in self._body_chunks(headers, reader):
                now = loop.time() * 1000.0
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.splitlines():
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            continue
                        msg = json.loads(payload)
                        if "error" in msg:
                            raise ServerError(f"server error: {msg['error']}")
                        usage = msg.get("usage") or {}
                        n = usage.get("completion_tokens")
                        if msg.get("choices") and n is not None and n > done.output_tokens:
                            if done.first_ms is None:
                                done.first_ms = now
                            done.chunk_ms.append(now)
                            done.chunk_tokens.append(n)
                            done.output_tokens = n
                        elif n is not None:
                            done.output_tokens = max(done.output_tokens, n)
            done.end_ms = loop.time() * 1000.0
        finally:
            writer.close()
        if done.output_tokens != output_tokens:
            raise ServerError(f"asked for {output_tokens} tokens, the server sent {done.output_tokens}")
        return done
