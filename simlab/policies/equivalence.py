"""Options that run as a static cap: two arms with the same key make the same decisions, so one simulation serves both.

A static cap (`Static`) reads maxConcurrency, batchMaxConcurrency, tieBreak and the eviction options, nothing else:
interactive first, a batch task starts while fewer than the cap run. Two gates reduce to it, provably, wherever what
they adapt to cannot move:

- **gradient2 with minLimit >= maxConcurrency.** Its limit L is clamped into [minLimit, maxConcurrency] at the start
  and after every update, so L = maxConcurrency for the whole run. Inside the drain fewer than L tasks run, so
  an interactive task always starts, and a batch task's ceiling min(bmax, max(L - interactive, batchPartition)) is
  above the batch tasks running whenever bmax is: a batch task starts exactly when fewer than bmax run.
- **holdback whose saturation can only be 0.** Its signal reads the backend's queue alone ("queue", or
  "utilization" without a KV cache) and the backend never queues a dispatched task (the driver says so:
  `backend_queues=False`, e.g. GPU slots at least maxConcurrency behind one gateway). Then S = 0 at every decision:
  the interactive band is never gated (maxCeiling > 0) and the batch cap is `holdback_limit(0)` all run long.

Every other policy runs as itself (None). tests/test_equivalence.py simulates each reduction beside its static cap
and compares every task's times.
"""

from __future__ import annotations

from simlab.policies.gates import holdback_limit
from simlab.policies.options import SchedulerOptions


def static_key(options: SchedulerOptions, backend_queues: bool = True, kv_cache: bool = True) -> tuple | None:
    """(maxConcurrency, batch cap, tieBreak, evict, evictAfterMs) of the static cap `options` runs as, or None when
    it may run otherwise. `backend_queues`: a dispatched task may wait inside the backend; `kv_cache`: the backend
    reports KV-cache use. Unknown facts are the safe defaults (True)."""
    cap = _static_cap(options, backend_queues, kv_cache)
    if cap is None:
        return None
    evict = (options.evict, options.evict_after_ms) if options.evicts else (None, None)
    return (options.max_concurrency, cap, options.tie_break, *evict)


def _static_cap(o: SchedulerOptions, backend_queues: bool, kv_cache: bool) -> int | None:
    most = o.max_concurrency
    if most is None:
        return None
    if o.policy == "static":
        return o.batch_max_concurrency
    bmax = o.batch_max_concurrency if o.batch_max_concurrency is not None else most
    if o.policy == "gradient2":
        return bmax if o.value("minLimit") >= most else None
    if o.policy == "holdback":
        signal, high = o.value("saturationSignal"), o.value("maxCeiling")
        reads_queue_alone = signal == "queue" or (signal == "utilization" and not kv_cache)
        if backend_queues or not reads_queue_alone or not high > 0:
            return None
        return holdback_limit(0.0, o.value("minCeiling"), high, bmax, o.value("holdbackShape") == "step")
    return None
