"""Sentences, made at render time from records that hold numbers only. One section per command."""

from __future__ import annotations

from simlab.records import ScenarioFacts


# --- the scenario (ab, fit) ---------------------------------------------------------------------------------------

def describe(s: ScenarioFacts) -> str:
    """The scenario in one paragraph: the model of the backend, each workload and its arrivals, duration and SLO.

    >>> from simlab.records import WorkloadFacts
    >>> describe(ScenarioFacts("chat", "Chat and a backfill", 600_000, 2_000, "slots", slots=16, workloads=[
    ...     WorkloadFacts("interactive", "chat", "poisson", rate_per_s=20), WorkloadFacts("batch", "fill", "burst", count=500)]))
    'Chat and a backfill. The model: an inference server with 16 GPU slots and its own FIFO queue; interactive `chat` with Poisson arrivals at 20/s; batch `fill` with bursts of 500 jobs; arrivals for 600 s, interactive SLO P95 2000 ms.'
    """
    world = {
        "delay": "a backend with unlimited capacity (pure service times)",
        "slots": f"an inference server with {s.slots} GPU slots and its own FIFO queue",
        "continuous-batching": f"a continuous-batching GPU server (up to {s.max_num_seqs} sequences per step)",
        "api": f"a third-party API with a concurrency quota of {s.concurrency}"
        + (f", {s.rpm:g} requests/min" if s.rpm else "") + (f", {s.tpm:g} tokens/min" if s.tpm else ""),
    }.get(s.backend, f"a {s.backend} backend")
    parts = [f"{w.kind} `{w.name}` with {_arrivals(w)}" for w in s.workloads]
    return (f"{(s.description or s.name).rstrip('.')}. The model: {world}; " + "; ".join(parts)
            + f"; arrivals for {s.duration_ms / 1000:g} s, interactive SLO P95 {s.slo_p95_ms:g} ms.")


def _arrivals(w) -> str:
    return {
        "poisson": lambda: f"Poisson arrivals at {w.rate_per_s:g}/s",
        "piecewise": lambda: f"a piecewise rate ({w.steps} steps of {w.step_ms / 1000:g} s)",
        "diurnal": lambda: f"a diurnal rate around {w.rate_per_s:g}/s",
        "burst": lambda: f"bursts of {w.count} jobs",
        "closed-loop": lambda: f"{w.users} closed-loop users",
        "trace": lambda: f"a replayed trace ({w.file})",
        "resampled": lambda: f"arrivals resampled from {w.file} in {w.step_ms / 1000:g} s blocks",
    }.get(w.process, lambda: f"{w.process} arrivals")()  # a process added later still gets described
