"""Capacity check before any run: the offered interactive load against what the backend can serve.

Utilisation = offered work / capacity, from the scenario alone (no simulation): arrival rates of open-loop
processes analytically (poisson, piecewise and diurnal means), traces from their rows, closed-loop users from
their cycle (think + service); mean service from the distribution, the trace or `token_time`. Above 1, queues
grow for as long as the traffic lasts and no scheduler can hold a latency SLO: batch work only adds to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simlab.scenario import (
    ClosedLoop, Constant, Diurnal, Empirical, Exponential, Lognormal, Piecewise, Poisson, Resampled, Scenario, Trace,
    Uniform,
)  # fmt: skip

Z95 = 1.6448536269514722


@dataclass
class Capacity:
    backend: str
    rate_per_s: float  # interactive arrivals offered, per second
    utilisation: float | None  # offered / capacity; None when capacity is unlimited (delay backend)
    detail: str  # how the figure was computed, with the numbers
    service_p95_ms: float | None = None  # one request alone, no queueing: a floor for interactive P95
    slo_p95_ms: float = math.nan
    notes: list[str] = field(default_factory=list)

    @property
    def overloaded(self) -> bool:
        return self.utilisation is not None and self.utilisation > 1

    @property
    def slo_unreachable(self) -> bool:
        """No scheduler can meet the P95 SLO: the interactive traffic alone overloads the backend, or one
        request alone already takes longer than the SLO at P95."""
        return self.overloaded or (self.service_p95_ms is not None and self.service_p95_ms > self.slo_p95_ms)

    def warnings(self) -> list[str]:
        out = []
        if self.overloaded:
            out.append(
                f"capacity: the interactive traffic alone exceeds the backend's capacity, utilisation "
                f"{self.utilisation:.2f} ({self.detail}). Queues grow for as long as this traffic lasts: no scheduler "
                f"can keep interactive P95 under the SLO ({self.slo_p95_ms:,.0f} ms), with or without batch work."
            )
        if self.service_p95_ms is not None and self.service_p95_ms > self.slo_p95_ms:
            out.append(
                f"capacity: one interactive request alone takes {self.service_p95_ms:,.0f} ms at P95, above the SLO "
                f"({self.slo_p95_ms:,.0f} ms): no scheduler can meet this SLO on this traffic."
            )
        return out


# --- what the workloads offer ------------------------------------------------------------------------
def dist_mean(dist, scenario: Scenario) -> float:
    if isinstance(dist, Constant):
        return dist.value
    if isinstance(dist, Exponential):
        return dist.mean
    if isinstance(dist, Lognormal):
        sigma = (math.log(dist.p95) - math.log(dist.median)) / Z95
        return dist.median * math.exp(sigma**2 / 2)
    if isinstance(dist, Uniform):
        return (dist.low + dist.high) / 2
    if isinstance(dist, Empirical):
        from simlab.world.distributions import empirical_values

        return float(np.mean(empirical_values(scenario.resolve(dist.file), dist.column))) * dist.scale
    raise TypeError(dist)


def dist_p95(dist, scenario: Scenario) -> float:
    if isinstance(dist, Constant):
        return dist.value
    if isinstance(dist, Exponential):
        return dist.mean * math.log(20)
    if isinstance(dist, Lognormal):
        return dist.p95
    if isinstance(dist, Uniform):
        return dist.low + 0.95 * (dist.high - dist.low)
    if isinstance(dist, Empirical):
        from simlab.world.distributions import empirical_values

        return float(np.percentile(empirical_values(scenario.resolve(dist.file), dist.column), 95)) * dist.scale
    raise TypeError(dist)


@dataclass
class Offer:
    """One interactive workload: arrivals per second and mean sizes (NaN when not known)."""

    name: str
    rate_per_s: float
    service_ms: float  # in isolation (service distribution, trace column or token_time)
    prompt_tokens: float
    output_tokens: float
    service_p95_ms: float | None


def _open_loop_rate(arr, duration_ms: float) -> float:
    if isinstance(arr, Poisson):
        return arr.rate_per_s
    if isinstance(arr, Piecewise):
        return float(np.mean(arr.rates_per_s))  # equal steps: the time-weighted mean of the pattern
    if isinstance(arr, Diurnal):
        return arr.mean_rate_per_s
    raise TypeError(arr)


def offers(scenario: Scenario) -> list[Offer]:
    tt = scenario.backend.token_time
    out = []
    for wi, w in enumerate(scenario.workload):
        if w.kind != "interactive":
            continue
        name = w.name or f"workload[{wi}]"
        arr = w.arrivals
        prompt = dist_mean(w.prompt_tokens, scenario) if w.prompt_tokens is not None else math.nan
        output = dist_mean(w.output_tokens, scenario) if w.output_tokens is not None else math.nan
        service = dist_mean(w.service, scenario) if w.service is not None else math.nan
        p95 = dist_p95(w.service, scenario) if w.service is not None else None
        if isinstance(arr, Trace):
            from simlab.world.workloads import trace_rows

            frame = trace_rows(arr, w.kind, scenario)
            if len(frame) < 2:
                continue
            t = frame["arrival_ms"].to_numpy(dtype=float)
            span = float(t.max() - t.min())
            rate = (len(t) - 1) / span * 1000 if span > 0 else math.inf
            if w.service is None and "service_ms" in frame:
                s = frame["service_ms"].to_numpy(dtype=float)
                service, p95 = float(np.mean(s)), float(np.percentile(s, 95))
            if w.prompt_tokens is None and "prompt_tokens" in frame:
                prompt = float(frame["prompt_tokens"].mean())
                output = float(frame["output_tokens"].mean())
        elif isinstance(arr, ClosedLoop):
            think = dist_mean(arr.think, scenario)
            svc = service if math.isfinite(service) else _token_service(tt, prompt, output)
            cycle = think + (svc if math.isfinite(svc) else 0.0)
            rate = arr.users / cycle * 1000 if cycle > 0 else math.inf
        elif isinstance(arr, Resampled):  # blocks of the log's own window: its mean rate over the span resampled
            from simlab.world.workloads import resampled_log

            span = arr.span_ms or scenario.duration_ms
            rate = float(np.count_nonzero(resampled_log(arr, scenario) < span)) / span * 1000
        elif hasattr(arr, "count"):  # a burst of interactive requests: its mean rate over the duration
            at = arr.at_ms if isinstance(arr.at_ms, list) else [arr.at_ms]
            rate = arr.count * len(at) / scenario.duration_ms * 1000
        else:
            rate = _open_loop_rate(arr, scenario.duration_ms)
        if not isinstance(arr, ClosedLoop):
            rate *= getattr(w, "load", 1.0)  # a load multiplier thins or superposes open-loop arrivals
        if not math.isfinite(service):
            service = _token_service(tt, prompt, output)
        out.append(Offer(name, rate, service, prompt, output, p95))
    return out


def _token_service(tt, prompt: float, output: float) -> float:
    if tt is None or not (math.isfinite(prompt) and math.isfinite(output)):
        return math.nan
    return tt.base_ms + tt.per_prompt_token_ms * prompt + tt.per_output_token_ms * output


# --- against the backend ------------------------------------------------------------------------------
def _decode_step_ms(scenario: Scenario, seqs: int) -> float:
    """One decode-only iteration with `seqs` sequences (the continuous-batching step model)."""
    step = scenario.backend.step
    if step is None:
        from simlab.scenario import StepTime

        step = StepTime()
    if step.profile is not None:
        from simlab.world.backends.continuous_batching import read_profile

        sizes, times = read_profile(scenario.resolve(step.profile))
        return float(np.interp(seqs, sizes, times))  # per_token_ms applies to prefill tokens only
    return step.base_ms + (step.per_token_ms + step.per_seq_ms) * seqs


def announce(scenario: Scenario, say, held_out: bool = False) -> None:
    """Pass each of `check`'s warnings to `say` (the commands print them, the Python API issues them as warnings):
    for the scenario's traffic and, with `held_out`, for each held-out condition other than the scenario itself
    (tune and decide judge on those, and they may carry more load than the scenario)."""
    for w in check(scenario).warnings():
        say(w)
    if held_out:
        from simlab.world.conditions import split

        for cond in split(scenario)[1]:
            if cond.name != "base":
                for w in check(cond.apply(scenario)).warnings():
                    say(f"held-out condition {cond.name}: {w}")


def check(scenario: Scenario) -> Capacity:
    """The interactive utilisation of the scenario's backend, computed from the scenario alone."""
    b = scenario.backend
    offered = offers(scenario)
    rate = sum(o.rate_per_s for o in offered)
    p95s = [o.service_p95_ms for o in offered]
    service_p95 = p95s[0] if len(p95s) == 1 else None  # a floor is only clear for a single interactive stream
    cap = Capacity(b.kind, rate, None, "", service_p95, scenario.slo_p95_ms)
    if not offered or rate == 0:
        cap.detail = "no interactive traffic"
        return cap
    mean_service = sum(o.rate_per_s * o.service_ms for o in offered) / rate
    if b.kind == "delay":
        cap.detail = f"{rate:.3g} req/s; the delay backend has unlimited capacity"
    elif b.kind == "slots":
        cap.utilisation = rate * mean_service / 1000 / b.slots
        cap.detail = f"{rate:.3g} req/s x {mean_service / 1000:.3g} s mean service / {b.slots} slots"
    elif b.kind == "continuous-batching":
        seqs = b.max_num_seqs
        step = _decode_step_ms(scenario, seqs)
        per_token = (b.step.per_token_ms if b.step is not None else 0.0)
        work = sum(o.rate_per_s * (o.output_tokens * step / seqs + o.prompt_tokens * per_token) for o in offered)
        cap.utilisation = work / 1000
        out_tokens = sum(o.rate_per_s * o.output_tokens for o in offered)
        cap.detail = (f"{rate:.3g} req/s x {out_tokens / rate:.3g} output tokens = {out_tokens:,.0f} tokens/s against "
                      f"{seqs / step * 1000:,.0f} tokens/s at {seqs} sequences ({step:.3g} ms per decode step)"
                      + (", plus prefill" if per_token > 0 else ""))
    elif b.kind == "api":
        limits = {"concurrency": rate * mean_service / 1000 / b.concurrency}
        texts = {"concurrency": f"{rate:.3g} req/s x {mean_service / 1000:.3g} s mean latency / {b.concurrency} concurrent"}
        if b.rpm is not None:
            limits["rpm"] = rate * 60 / b.rpm
            texts["rpm"] = f"{rate * 60:,.0f} requests/min against rpm {b.rpm:,.0f}"
        if b.tpm is not None:
            tokens = sum(o.rate_per_s * (o.prompt_tokens + o.output_tokens) for o in offered) * 60
            if math.isfinite(tokens):
                limits["tpm"] = tokens / b.tpm
                texts["tpm"] = f"{tokens:,.0f} tokens/min against tpm {b.tpm:,.0f}"
        binding = max(limits, key=limits.get)
        cap.utilisation = limits[binding]
        cap.detail = f"{texts[binding]}; binding limit: {binding}"
    if cap.utilisation is not None and not math.isfinite(cap.utilisation):
        cap.utilisation = None
        cap.notes.append("utilisation unknown: a mean size could not be derived")
    return cap


def describe(cap: Capacity) -> str:
    """One line for a command's output."""
    if cap.utilisation is None:
        return f"capacity: {cap.detail}"
    return f"capacity: interactive utilisation {cap.utilisation:.2f} ({cap.detail})"
