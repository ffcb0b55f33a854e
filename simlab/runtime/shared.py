"""One concurrency limit shared by several gateway instances, on Redis (the article's "Redis distributed semaphore").

    limiter = RedisLimiter("redis://10.0.0.5:6379/0", key_prefix="chat-gw", instances=4)
    scheduler = Scheduler(options, limiter=limiter)
    await limiter.start()           # a clear error here if Redis is unreachable or the URL is wrong
    ... await scheduler.submit("interactive", call_model, prompt) ...   # unchanged
    await limiter.close()

Each instance keeps the article's policy with the full options (its queues, its interactive-first drain, its batch
cap). A task the policy starts must then hold a **lease** in Redis before its caller runs, so the total
`maxConcurrency` and the batch cap hold across all instances together, not per instance.

Keys (`P` is `key_prefix`):
- `P:leases:interactive`, `P:leases:batch`: sorted sets of leases, member `<instance>/<task id>`, score its expiry
  (Redis server time, ms). The global in flight of a class is the number of members whose score is in the future.
- `P:waiting` (hash instance -> count) and `P:waiting:expiry` (sorted set): each instance's interactive tasks waiting
  for a slot, so a batch task elsewhere does not take the slot an interactive one waits for (interactive first
  across instances, as within one). An entry lapses `lease_ms` after its instance last wrote it.
- channel `P:events`: `r <instance>` when slots are freed (waiters elsewhere try again at once), and
  `c <instance> <latency ms>` for each interactive completion (the shared window, below).

Acquisition is one Lua script (`STEP`), so it is atomic: it frees the leases of ended tasks, renews the leases
due for renewal, drops expired leases (a killed process's), then grants the waiting tasks in order (interactive
first, then batch) while `interactive + batch < maxConcurrency` and, for batch, `batch < cap` (the asking
instance's batch cap in force) and `interactive + batch + interactive waiting elsewhere < maxConcurrency`. It
stops at the first refusal. It runs on Redis's own clock (`TIME`), so the instances' clocks do not matter.

Leases: every slot held is a lease of `lease_ms` (default 5000), renewed every `renew_ms` (default a third of it)
while its task runs, and deleted when it ends. A process killed with its slots held gives them back when their
leases expire: within `lease_ms` of its last renewal, so within `lease_ms` of its death. A lease found missing at
renewal (it expired: the process stalled longer than the TTL) is added back and counted (`leases_lost`).

The window. `window="shared"` (the default): every instance's policy counts the interactive completions of all
instances (published on the channel, counted on arrival, so one pub/sub hop late). `window="local"`: each instance
counts its own. The default is shared because the options mean the whole service: `interactiveRpsThreshold` is
tuned (by simlab tune, on one gateway) against the total interactive rate, and with local windows each of N
instances sees about 1/N of it, so the RPS term of the pressure falls N-fold and the batch cap stays higher than
one gateway would keep it under the same traffic. The price is one message per interactive completion to each
instance, and a window that a freshly started instance fills over `windowMs`. (Which keeps interactive P95 lower is
for the simulation's `[gateway]` comparison to measure.) Arrival-rate pressure (`rpsSource = "arrivals"`) stays
local in both.

When Redis is lost mid-run (a call fails or takes longer than `timeout_ms`): the limiter logs one warning and
switches to the fallback `split`: this instance grants slots locally with the caps divided by `instances`
(`max(1, maxConcurrency // instances)` in all, `max(1, cap // instances)` batch; the sum over instances stays
within the caps whenever they are at least `instances`), counting the tasks already running; never more, never
unbounded. The `simlab_scheduler_limiter_shared` gauge reads 0, and the window holds this instance's completions
only. An idle instance notices the loss at its next renewal (within `renew_ms`). Every `probe_ms` it tries Redis again; the first call that succeeds re-registers every
slot this instance holds as a lease (whatever Redis remembers), so the global count includes the work that ran in
fallback, and from then on slots are granted by Redis again (the gauge reads 1 and an info line is logged). Right
after recovery the global count can exceed the cap (instances in fallback and one that kept Redis all granted);
no new slot is granted until it is back below.

Every Redis call is bounded: socket and connect timeouts, no client retries, and an `asyncio.timeout` around
it (not `wait_for`, which on Python 3.11 can swallow a cancellation that races with its result).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import socket
import uuid
from collections import deque
from contextlib import suppress
from dataclasses import asdict, dataclass
from urllib.parse import parse_qs, urlsplit

from simlab.policies import BATCH, INTERACTIVE

SHARED = "shared"
FALLBACK = "fallback"
WINDOWS = ("shared", "local")
_CODE = {INTERACTIVE: "i", BATCH: "b"}

log = logging.getLogger(__name__)

# KEYS: 1 interactive leases, 2 batch leases, 3 interactive waiting per instance (hash), 4 their expiries (zset).
# ARGV: 1 instance, 2 channel, 3 maxConcurrency, 4 batch cap (-1: none), 5 lease ms, 6 #releases, 7 #renewals,
#       8 #candidates, then releases (kind, member, latency), renewals (kind, member), candidates (kind, member);
#       kind 'i' or 'b'; member '' for a completion that held no lease; latency '' when none is published.
# Returns {granted, interactive in flight, batch in flight, leases re-added, interactive waiting elsewhere,
#          this instance's interactive left waiting}.
STEP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = {i = KEYS[1], b = KEYS[2]}
local me, channel = ARGV[1], ARGV[2]
local most, cap, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local a = 9
local freed = 0
for _ = 1, tonumber(ARGV[6]) do
  if ARGV[a + 1] ~= '' then freed = freed + redis.call('ZREM', key[ARGV[a]], ARGV[a + 1]) end
  if ARGV[a + 2] ~= '' then redis.call('PUBLISH', channel, 'c ' .. me .. ' ' .. ARGV[a + 2]) end
  a = a + 3
end
-- renew before cleaning: a lease past its expiry but still here was never counted free by anyone
local lost = 0
for _ = 1, tonumber(ARGV[7]) do
  lost = lost + redis.call('ZADD', key[ARGV[a]], now + ttl, ARGV[a + 1])
  a = a + 2
end
freed = freed + redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
freed = freed + redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do redis.call('HDEL', KEYS[3], gone) end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local others = 0
local waiting = redis.call('HGETALL', KEYS[3])
for j = 1, #waiting, 2 do
  if waiting[j] ~= me then others = others + tonumber(waiting[j + 1]) end
end
local ni, nb = redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])
local granted, left, open = 0, 0, true
for _ = 1, tonumber(ARGV[8]) do
  local kind, member = ARGV[a], ARGV[a + 1]
  a = a + 2
  if open then
    if ni + nb >= most then
      open = false
    elseif kind == 'i' then
      redis.call('ZADD', KEYS[1], now + ttl, member)
      ni, granted = ni + 1, granted + 1
    elseif (cap >= 0 and nb >= cap) or ni + nb + others >= most then
      open = false
    else
      redis.call('ZADD', KEYS[2], now + ttl, member)
      nb, granted = nb + 1, granted + 1
    end
  end
  if not open and kind == 'i' then left = left + 1 end
end
if left > 0 then
  redis.call('HSET', KEYS[3], me, left)
  redis.call('ZADD', KEYS[4], now + ttl, me)
else
  redis.call('HDEL', KEYS[3], me)
  redis.call('ZREM', KEYS[4], me)
end
if freed > 0 then redis.call('PUBLISH', channel, 'r ' .. me) end
return {granted, ni, nb, lost, others, left}
"""

_PASSWORD = re.compile(r"(://[^:@/]*:)[^@/]*@")
_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def redact(url: str) -> str:
    """The URL with any password replaced by `***`."""
    return _PASSWORD.sub(r"\1***@", url)


def check_url(url: str) -> None:
    """Raise ValueError (naming the URL, password redacted) unless `url` is a well-formed Redis URL."""
    shown = redact(str(url))
    if not isinstance(url, str) or not url:
        raise ValueError(f"expected a Redis URL such as redis://127.0.0.1:6379/0 (found {shown!r})")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
    except ValueError as exc:
        raise ValueError(f"not a valid Redis URL: {shown} ({exc})") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"a Redis URL starts with redis://, rediss:// or unix:// (found {shown})")
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError(f"a unix:// Redis URL needs the socket's path (found {shown})")
        db = parse_qs(parts.query).get("db", ["0"])[0]
    else:
        if not parts.hostname:
            raise ValueError(f"the Redis URL names no host (found {shown})")
        db = parts.path.strip("/") or "0"
    if not db.isdigit():
        raise ValueError(f"the Redis URL's database must be a number (found {db!r} in {shown})")


@dataclass(frozen=True)
class LimiterState:
    """What the limiter knows now (the Prometheus gauges read it)."""

    mode: str  # "shared" or "fallback"
    instances: int
    global_interactive: int  # leases in Redis, as of the last answer
    global_batch: int
    held_interactive: int  # slots this instance holds (leases, or local grants in fallback)
    held_batch: int
    waiting_interactive: int  # started by the policy here, waiting for a slot
    waiting_batch: int
    fallbacks: int  # times Redis was lost
    recoveries: int  # times it came back
    leases_lost: int  # leases found expired at renewal and added back

    def as_dict(self) -> dict:
        return asdict(self)


class RedisLimiter:
    """A global limit on the policy's `maxConcurrency` and batch cap, shared through Redis (see the module doc)."""

    def __init__(
        self,
        url: str,
        *,
        instances: int,
        key_prefix: str = "simlab:limiter",
        instance_id: str | None = None,
        lease_ms: float = 5000.0,
        renew_ms: float | None = None,
        window: str = "shared",
        timeout_ms: float = 500.0,
        connect_timeout_ms: float = 2000.0,
        probe_ms: float | None = None,
        poll_ms: float = 100.0,
    ):
        check_url(url)
        if not isinstance(instances, int) or isinstance(instances, bool) or instances < 1:
            raise ValueError(f"instances must be a whole number >= 1, the gateway instances sharing the limit "
                             f"(found {instances!r})")
        if window not in WINDOWS:
            raise ValueError(f"window must be one of {', '.join(WINDOWS)} (found {window!r})")
        for name, value in (("key_prefix", key_prefix), ("instance_id", instance_id)):
            if value is not None and not _NAME.match(value):
                raise ValueError(f"{name} may use letters, digits and _.:- only (found {value!r})")
        renew_ms = lease_ms / 3 if renew_ms is None else renew_ms
        for name, value in (("lease_ms", lease_ms), ("renew_ms", renew_ms), ("timeout_ms", timeout_ms),
                            ("connect_timeout_ms", connect_timeout_ms), ("poll_ms", poll_ms)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 (found {value!r})")
        if not renew_ms + timeout_ms < lease_ms:
            raise ValueError(f"renew_ms + timeout_ms ({renew_ms} + {timeout_ms}) must be below lease_ms ({lease_ms}):"
                             " a lease must be renewed before it expires")
        self.url = url
        self.redacted_url = redact(url)
        self.instances = instances
        self.key_prefix = key_prefix
        self.instance_id = instance_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        if not _NAME.match(self.instance_id):
            self.instance_id = re.sub(r"[^A-Za-z0-9_.:-]", "_", self.instance_id)
        self.lease_ms = float(lease_ms)
        self.renew_ms = float(renew_ms)
        self.window = window
        self.timeout_ms = float(timeout_ms)
        self.connect_timeout_ms = float(connect_timeout_ms)
        self.probe_ms = float(probe_ms if probe_ms is not None else min(1000.0, self.renew_ms))
        self.poll_ms = float(poll_ms)
        self.keys = [f"{key_prefix}:leases:interactive", f"{key_prefix}:leases:batch", f"{key_prefix}:waiting",
                     f"{key_prefix}:waiting:expiry"]
        self.channel = f"{key_prefix}:events"

        self.mode = SHARED
        self.fallbacks = 0
        self.recoveries = 0
        self.leases_lost = 0
        self.global_in_flight = (0, 0)
        self._scheduler = None
        self._client = None
        self._script = None
        self._worker: asyncio.Task | None = None
        self._listener: asyncio.Task | None = None
        self._started = False
        self._closed = False
        self._waiting = {INTERACTIVE: deque(), BATCH: deque()}
        self._held: dict = {}  # task -> lease member
        self._held_batch = 0
        self._releases: list[tuple[str, str, str]] = []  # (kind code, member or '', latency or '')
        self._published_waiting: int | None = None  # own interactive waiting count as Redis last heard it
        self._dirty = False  # something changed since the last refusal: worth asking again
        self._probing = False
        self._renew_at = 0.0  # loop seconds
        self._retry_at = math.inf
        self._probe_at = 0.0
        self._kick: asyncio.Event | None = None
        self._shared_again: asyncio.Event | None = None

    # --- set-up --------------------------------------------------------------------------------------------------
    def attach(self, scheduler) -> None:
        """Called by `Scheduler(options, limiter=self)`: one limiter per scheduler."""
        if self._scheduler is not None and self._scheduler is not scheduler:
            raise ValueError("a RedisLimiter serves one Scheduler; make one per scheduler")
        if scheduler.options.max_concurrency is None:
            raise ValueError(f"a shared limit needs maxConcurrency (policy {scheduler.options.policy!r} has none)")
        self._scheduler = scheduler

    async def start(self) -> "RedisLimiter":
        """Connect, check the server and the script, and start renewing and listening. Raises ConnectionError
        (naming the URL, password redacted) when Redis cannot be reached or refuses."""
        if self._scheduler is None:
            raise RuntimeError("give the limiter to a Scheduler first: Scheduler(options, limiter=limiter)")
        if self._started:
            return self
        try:
            from redis.asyncio import Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
        except ImportError:
            raise ImportError("the shared limiter needs the optional extra: pip install 'simlab[redis]'") from None
        self._client = Redis.from_url(
            self.url, socket_timeout=self.timeout_ms / 1000, socket_connect_timeout=self.connect_timeout_ms / 1000,
            retry=Retry(NoBackoff(), 0), decode_responses=True, health_check_interval=0)
        self._kick, self._shared_again = asyncio.Event(), asyncio.Event()
        self._shared_again.set()
        problem = None
        try:
            bound = (self.connect_timeout_ms + self.timeout_ms) / 1000
            info = await _bounded(self._client.info("server"), bound)
            version = str(info.get("redis_version", "0"))
            if int(version.split(".")[0]) < 5:
                problem = f"it is Redis {version}; the limiter's script needs Redis 5 or newer"
            else:
                self._script = self._client.register_script(STEP)
                await _bounded(self._call([], [], []), bound)  # the script runs: a heartbeat, nothing else
        except Exception as exc:  # noqa: BLE001 (any failure here is a configuration error to report)
            problem = _describe(exc)
        if problem is not None:
            await self._close_client()
            raise ConnectionError(f"cannot use Redis at {self.redacted_url}: {problem}")
        loop = asyncio.get_running_loop()
        self._renew_at = loop.time() + self.renew_ms / 1000
        self._started = True
        self._worker = loop.create_task(self._run(), name="simlab-limiter")
        self._listener = loop.create_task(self._listen(), name="simlab-limiter-events")
        return self

    async def close(self) -> None:
        """Stop renewing, give back every lease this instance holds, close the connections. Tasks still waiting
        are then granted locally with the fallback's split caps (bounded); close once the scheduler is idle."""
        if self._closed:
            return
        self._closed = True
        if self._kick is not None:
            self._kick.set()
        # The worker finishes the call it may have on its way (bounded), so no release or grant is lost mid-air.
        for job in (self._worker, self._listener):
            if job is not None:
                if job is self._listener:
                    job.cancel()
                await asyncio.wait([job], timeout=self.timeout_ms / 1000 * 2)
                if not job.done():
                    job.cancel()
                    await asyncio.wait([job], timeout=self.timeout_ms / 1000)
        if self._started and self.mode == SHARED and self._client is not None:
            releases = self._releases + [(_CODE[t.kind], m, "") for t, m in self._held.items()]
            self._releases = []
            try:
                await _bounded(self._call(releases, [], []), self.timeout_ms / 1000)
            except Exception as exc:  # noqa: BLE001
                log.warning("closing: could not give back %d leases to Redis at %s (%s); they expire within %.0f ms",
                            len(releases), self.redacted_url, _describe(exc), self.lease_ms)
        self.mode = FALLBACK
        await self._close_client()
        self._grant_local()

    async def __aenter__(self) -> "RedisLimiter":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _close_client(self) -> None:
        if self._client is not None:
            with suppress(Exception):
                await _bounded(self._client.aclose(), self.timeout_ms / 1000)
            self._client = None

    # --- what the Scheduler calls ----------------------------------------------------------------------------
    def check_ready(self) -> None:
        if not self._started and not self._closed:
            raise RuntimeError("await limiter.start() before submitting work")

    def admit(self, task) -> None:
        """The policy started `task`: resolve its future once it holds a slot."""
        self._waiting[task.kind].append(task)
        if self.mode == SHARED:
            self._dirty = True
            self._kick.set()
        else:
            self._grant_local()

    def release(self, task) -> None:
        """`task` ended (or its caller gave up waiting): give its slot back, publish its latency."""
        code = _CODE[task.kind]
        latency = ""
        if task.interactive and self.window == "shared":
            latency = repr(round(task.end_ms - task.submitted_ms, 3))
        member = self._held.pop(task, None)
        if member is None:
            with suppress(ValueError):  # a step in flight that grants it gives the lease straight back
                self._waiting[task.kind].remove(task)
        elif not task.interactive:
            self._held_batch -= 1
        if self.mode == SHARED:
            if member is not None or latency:
                self._releases.append((code, member or "", latency))
            self._kick.set()
        else:
            if self._probing and member is not None:  # the probe in flight may re-register it: free it after
                self._releases.append((code, member, ""))
            self._grant_local()

    def waiting_counts(self) -> tuple[int, int]:
        return len(self._waiting[INTERACTIVE]), len(self._waiting[BATCH])

    def state(self) -> LimiterState:
        held_i = len(self._held) - self._held_batch
        wi, wb = self.waiting_counts()
        gi, gb = self.global_in_flight
        return LimiterState(self.mode, self.instances, gi, gb, held_i, self._held_batch, wi, wb, self.fallbacks,
                            self.recoveries, self.leases_lost)

    # --- granting ----------------------------------------------------------------------------------------------
    def _member(self, task) -> str:
        return f"{self.instance_id}/{task.id}"

    def _hold(self, task) -> None:
        self._held[task] = self._member(task)
        if not task.interactive:
            self._held_batch += 1
        if not task.payload.done():  # else its caller gave up: the scheduler releases it when it resumes
            task.payload.set_result(None)

    def _grant_local(self) -> None:
        """The fallback: this instance's share of the caps, counting every slot it holds."""
        most = max(1, self._scheduler.options.max_concurrency // self.instances)
        cap = self._scheduler.policy.batch_cap()
        batch_most = math.inf if cap == math.inf else max(1 if cap >= 1 else 0, int(cap) // self.instances)
        interactive, batch = self._waiting[INTERACTIVE], self._waiting[BATCH]
        while len(self._held) < most:
            if interactive:
                self._hold(interactive.popleft())
            elif batch and self._held_batch < batch_most:
                self._hold(batch.popleft())
            else:
                break

    # --- talking to Redis ---------------------------------------------------------------------------------------
    async def _call(self, releases, renewals, candidates):
        cap = self._scheduler.policy.batch_cap()
        args = [self.instance_id, self.channel, self._scheduler.options.max_concurrency,
                -1 if cap == math.inf else int(cap), int(self.lease_ms), len(releases), len(renewals),
                len(candidates)]
        for release in releases:
            args.extend(release)
        for task, member in renewals:
            args.extend((_CODE[task.kind], member))
        for task in candidates:
            args.extend((_CODE[task.kind], self._member(task)))
        return await self._script(keys=self.keys, args=args)

    async def _step(self, adopt: bool = False) -> bool:
        """One round trip: releases, renewals (all held slots when due, or when re-registering), grants. False if
        Redis failed (the limiter is then in fallback)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        renew = adopt or now >= self._renew_at
        candidates = [*self._waiting[INTERACTIVE], *self._waiting[BATCH]]
        wanted = candidates and (self._dirty or now >= self._retry_at)
        if not (self._releases or renew or wanted or self._published_waiting != len(self._waiting[INTERACTIVE])):
            return True
        releases, self._releases = self._releases, []
        renewals = list(self._held.items()) if renew else []
        self._dirty = False
        try:
            answer = await _bounded(self._call(releases, renewals, candidates), self.timeout_ms / 1000)
            granted, gi, gb, lost, _others, left = (int(x) for x in answer)
        except Exception as exc:  # noqa: BLE001 (Redis errors, OSError, timeouts: all mean "Redis is not usable")
            self._lost(exc)
            return False
        self.global_in_flight = (gi, gb)
        self._published_waiting = left
        if renew:
            self._renew_at = now + self.renew_ms / 1000
            if lost and not adopt:
                self.leases_lost += lost
                log.warning("%s: %d lease(s) had expired before renewal (a stall longer than %.0f ms?); added back",
                            self.instance_id, lost, self.lease_ms)
        for task in candidates[:granted]:
            if task in self._held:
                continue  # granted locally while the answer was on its way (fallback): the lease stands
            try:
                self._waiting[task.kind].remove(task)
            except ValueError:  # withdrawn while the answer was on its way: give the lease back
                self._releases.append((_CODE[task.kind], self._member(task), ""))
                self._kick.set()
                continue
            self._hold(task)
        self._retry_at = loop.time() + self.poll_ms / 1000 if granted < len(candidates) else math.inf
        return True

    def _lost(self, exc: BaseException) -> None:
        now = asyncio.get_running_loop().time()
        self._probe_at = now + self.probe_ms / 1000
        self._releases = []  # nothing to tell a Redis we cannot reach: those leases expire within lease_ms
        self._published_waiting = None
        if self.mode != SHARED:
            return
        self.mode = FALLBACK
        self.fallbacks += 1
        self._shared_again.clear()
        most = max(1, self._scheduler.options.max_concurrency // self.instances)
        log.warning("%s: Redis at %s failed (%s): falling back to split caps (%d slots here, 1/%d of each cap) "
                    "until it answers again", self.instance_id, self.redacted_url, _describe(exc), most, self.instances)
        self._grant_local()

    async def _probe(self) -> None:
        self._probing = True
        try:
            ok = await self._step(adopt=True)
        finally:
            self._probing = False
        if not ok:
            return
        held = len(self._held)
        self.mode = SHARED
        self.recoveries += 1
        self._dirty = True
        self._shared_again.set()
        self._kick.set()  # releases made during the probe go out now
        log.info("%s: Redis at %s answers again: shared limit restored (%d slot(s) here re-registered as leases)",
                 self.instance_id, self.redacted_url, held)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            until = min(self._renew_at, self._retry_at) if self.mode == SHARED else self._probe_at
            if until > now:
                with suppress(TimeoutError):
                    await _bounded(self._kick.wait(), until - now)
            self._kick.clear()
            if self._closed:
                return
            if self.mode == SHARED:
                await self._step()
            elif loop.time() >= self._probe_at:
                await self._probe()
                if self.mode != SHARED:
                    self._probe_at = loop.time() + self.probe_ms / 1000

    async def _listen(self) -> None:
        """Slots freed elsewhere (try again now) and interactive completions elsewhere (the shared window)."""
        bound = self.timeout_ms / 1000
        while not self._closed:
            await self._shared_again.wait()
            pubsub = self._client.pubsub()
            try:
                await _bounded(pubsub.subscribe(self.channel), bound)
                while self.mode == SHARED:
                    message = await _bounded(
                        pubsub.get_message(ignore_subscribe_messages=True, timeout=self.poll_ms / 1000),
                        self.poll_ms / 1000 + bound)
                    if message is not None:
                        self._on_event(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 (the worker's next call decides whether Redis is gone)
                self._dirty = True
                self._kick.set()
                await asyncio.sleep(self.poll_ms / 1000)
            finally:
                with suppress(Exception):
                    await _bounded(pubsub.aclose(), bound)

    def _on_event(self, data: str) -> None:
        what, _, rest = data.partition(" ")
        who, _, value = rest.partition(" ")
        if who == self.instance_id:
            return
        if what == "r":
            if self._waiting[INTERACTIVE] or self._waiting[BATCH]:
                self._dirty = True
                self._kick.set()
        elif what == "c" and self.window == "shared":
            with suppress(ValueError):
                self._scheduler.note_remote_completion(float(value))


async def _bounded(awaitable, seconds: float):
    async with asyncio.timeout(seconds):
        return await awaitable


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["FALLBACK", "SHARED", "LimiterState", "RedisLimiter", "check_url", "redact"]
