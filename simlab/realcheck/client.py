"""A small streaming client for an OpenAI-compatible `/v1/completions` server on this machine.

Prompts go as token ids (the real-engine server runs without a tokenizer); `ignore_eos` and `max_tokens` fix
the output length. Every streamed chunk is timed on arrival (loop clock, ms), with the server's running count of
completion tokens (`continuous_usage_stats`), so a response gives its time to first token and per-token gaps.

Loopback only: the client is built on a checked `Target` (simlab.realcheck.urls) and connects to its address only.
Bounded: every wait and read goes through simlab.realcheck.http's limits; an event-stream line longer than
`line_bytes`, a JSON answer larger than `json_bytes`, malformed JSON, an unexpected status or more tokens than asked
for are ServerErrors (exit 2) naming the server and the request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from simlab.realcheck.http import Limits, ServerError, exchange
from simlab.realcheck.urls import Target

# What every completion request asks for, beside its token counts: part of a kept run's identity (validate-real),
# so a change here is a change of the measurement.
REQUEST = {"prompt_token_ids": "100 + i % 1000", "ignore_eos": True, "min_tokens": "max_tokens", "temperature": 0.0,
           "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


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


class Client:
    def __init__(self, target: Target, limits: Limits | None = None, model: str | None = None):
        self.target = target
        self.limits = limits or Limits()
        self.model = model

    @property
    def port(self) -> int:
        return self.target.port

    async def get_json(self, path: str, deadline: float | None = None):
        ex = await exchange(self.target, "GET", path, None, self.limits, deadline)
        try:
            body = await ex.read_body(self.limits.json_bytes)
        finally:
            ex.close()
        if ex.status != 200:
            raise ex.fail(f"HTTP {ex.status} (expected 200): {_excerpt(body)}")
        try:
            return json.loads(body)
        except (UnicodeDecodeError, ValueError):
            raise ex.fail(f"not JSON: {_excerpt(body)}") from None

    async def model_name(self) -> str:
        """The first model the server lists (GET /v1/models), within the limits' header wait."""
        if self.model is None:
            loop = asyncio.get_running_loop()
            data = await self.get_json("/v1/models", loop.time() + self.limits.header_s)
            models = data.get("data") if isinstance(data, dict) else None
            first = models[0] if isinstance(models, list) and models else None
            name = first.get("id") if isinstance(first, dict) else None
            if not isinstance(name, str) or not name:
                raise ServerError(f"server {self.target.url}", f"response to GET {self.target.path}/v1/models",
                                  'expected {"data": [{"id": MODEL}, ...]} with at least one model, found '
                                  + _excerpt(json.dumps(data).encode()))
            self.model = name
        return self.model

    async def complete(self, prompt_tokens: int, output_tokens: int, token: int = 100,
                       deadline: float | None = None, priority: int | None = None) -> Completion:
        """Stream one completion of exactly `output_tokens` tokens for a prompt of `prompt_tokens` token ids;
        the whole exchange ends by `deadline` (loop clock, s) or is a ServerError. `priority` is vLLM's request
        field (lower is served first; a server not started with `--scheduling-policy priority` refuses any but 0);
        None leaves it out."""
        loop = asyncio.get_running_loop()
        model = await self.model_name()
        request = {
            "model": model, "prompt": [token + (i % 1000) for i in range(prompt_tokens)],
            "max_tokens": output_tokens, "min_tokens": output_tokens, "ignore_eos": True, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if priority is not None:
            request["priority"] = priority
        body = json.dumps(request).encode()
        done = Completion(sent_ms=loop.time() * 1000.0, prompt_tokens=prompt_tokens)
        ex = await exchange(self.target, "POST", "/v1/completions", body, self.limits, deadline)
        try:
            if ex.status != 200:
                text = await _head_of_body(ex, 4096)
                raise ex.fail(f"HTTP {ex.status} (expected 200): {_excerpt(text)}")
            lines = EventLines(self.limits.line_bytes, ex)
            async for data in ex.chunks():
                now = loop.time() * 1000.0
                for payload in lines.feed(data):
                    _count(done, _event(ex, payload), now, output_tokens, ex)
            done.end_ms = loop.time() * 1000.0
        finally:
            ex.close()
        if done.output_tokens != output_tokens:
            raise ex.fail(f"asked for {output_tokens} tokens, the server sent {done.output_tokens}")
        return done


class EventLines:
    """The `data:` payloads of an event stream, fed as bytes arrive; a line longer than `cap` is refused (so an
    endless line cannot grow memory)."""

    def __init__(self, cap: int, ex):
        self.cap, self.ex, self.buf = cap, ex, b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        if len(self.buf) > self.cap or any(len(line) > self.cap for line in lines):
            raise self.ex.fail(f"an event-stream line longer than {self.cap:,} bytes")
        out = []
        for line in lines:
            if line.startswith(b"data:"):
                payload = line[5:].strip()
                if payload != b"[DONE]":
                    out.append(payload)
        return out


def _event(ex, payload: bytes) -> dict:
    try:
        msg = json.loads(payload)
    except (UnicodeDecodeError, ValueError):
        raise ex.fail(f"malformed event-stream JSON: {_excerpt(payload)}") from None
    if not isinstance(msg, dict):
        raise ex.fail(f"an event-stream event that is not a JSON object: {_excerpt(payload)}")
    if "error" in msg:
        raise ex.fail(f"the server reported an error: {_excerpt(json.dumps(msg['error']).encode())}")
    return msg


def _count(done: Completion, msg: dict, now: float, asked: int, ex) -> None:
    usage = msg.get("usage") or {}
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if n is None:
        return
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ex.fail(f"usage.completion_tokens is {n!r}, expected a whole number")
    if n > asked:
        raise ex.fail(f"asked for {asked} tokens, the server reports {n}")
    if msg.get("choices") and n > done.output_tokens:
        if done.first_ms is None:
            done.first_ms = now
        done.chunk_ms.append(now)
        done.chunk_tokens.append(n)
        done.output_tokens = n
    else:
        done.output_tokens = max(done.output_tokens, n)


async def _head_of_body(ex, cap: int) -> bytes:
    """Up to `cap` bytes of an error response's body (the rest is not read)."""
    parts, size = [], 0
    try:
        async for data in ex.chunks():
            parts.append(data)
            size += len(data)
            if size >= cap:
                break
    except ServerError:
        pass  # the status is the error; a body that stalls or breaks adds nothing to it
    return b"".join(parts)[:cap]


def _excerpt(data: bytes, n: int = 200) -> str:
    text = data[:n].decode("utf-8", "replace")
    return repr(text) + (" ..." if len(data) > n else "")
