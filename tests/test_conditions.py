"""Traffic conditions: scenario transformations that keep common random numbers and the trace's bursts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simlab.errors import InputError
from simlab.scenario import load_scenario
from simlab.tuning.space import rounded
from simlab.world.conditions import conditions_of, split
from simlab.world.workloads import load_and_shift, open_loop_tasks

from tests.test_streams import small_slots

ROOT = Path(__file__).resolve().parents[1]


def test_conditions_from_the_table_and_the_split():
    s = small_slots().model_copy(update={"conditions": small_slots().conditions.model_copy(
        update={"load": [0.5, 1, 2], "batch_at_ms": [3000], "search": 2})})
    names = [c.name for c in conditions_of(s)]
    assert names == ["base", "load-x0.5", "load-x2", "batch-at-3s"]
    search, held = split(s)
    assert [c.name for c in search] == ["base", "load-x0.5"] and [c.name for c in held] == ["load-x2", "batch-at-3s"]


def test_load_scales_synthetic_rates_and_batch_delay_keeps_the_draws():
    s = small_slots()
    s = s.model_copy(update={"conditions": s.conditions.model_copy(update={"load": [2], "batch_at_ms": [3000]})})
    base, x2, late = conditions_of(s)
    n0 = sum(t.kind == "interactive" for t in open_loop_tasks(base.apply(s), 1))
    n2 = sum(t.kind == "interactive" for t in open_loop_tasks(x2.apply(s), 1))
    assert 1.7 < n2 / n0 < 2.3
    a = {t.id: t for t in open_loop_tasks(base.apply(s), 1) if t.kind == "batch"}
    b = {t.id: t for t in open_loop_tasks(late.apply(s), 1) if t.kind == "batch"}
    assert a.keys() == b.keys()
    assert all(b[k].arrival_ms == a[k].arrival_ms + 3000 and b[k].service_ms == a[k].service_ms for k in a)


def test_thinning_and_superposition_act_on_whole_tasks():
    rng = np.random.default_rng(0)
    times = np.sort(rng.uniform(0, 10_000, 1000))
    t, idx, copy = load_and_shift(times, 0.5, 0.0, 10_000, np.random.default_rng(1))
    assert 400 < len(t) < 600 and np.all(times[idx] == t) and not copy.any()
    t, idx, copy = load_and_shift(times, 2.5, 100.0, 10_000, np.random.default_rng(1))
    assert 2400 < len(t) < 2600 and np.all(np.diff(t) >= 0) and set(copy) == {0, 1, 2}
    assert np.allclose(np.sort(t[copy == 0]), times + 100)


def test_trace_windows_and_resamples_keep_bursts():
    s = load_scenario(ROOT / "scenarios" / "nightly-backfill.toml")
    trace = [w for w in s.workload if w.arrivals.process == "trace"]
    assert trace, "nightly-backfill replays a trace"
    s = s.model_copy(update={"conditions": s.conditions.model_copy(update={"time_shifts_ms": [60_000], "resamples": 2, "batch_at_ms": []})})
    conds = conditions_of(s)
    assert [c.name for c in conds] == ["base", "shift-60s", "resample-1", "resample-2"]

    def gaps(c):
        t = np.array([x.arrival_ms for x in open_loop_tasks(c.apply(s), 1) if x.kind == "interactive"])
        return t, np.diff(t)

    t0, g0 = gaps(conds[0])
    t1, _ = gaps(conds[1])
    assert not np.array_equal(t0[:50], t1[:50])  # another window
    for c in conds[2:]:
        t, g = gaps(c)
        assert 0.6 < len(t) / len(t0) < 1.4
        cv0, cv = g0.std() / g0.mean(), g.std() / g.mean()
        assert cv > 0.8 * cv0, (cv0, cv)  # blocks keep the bursts: the inter-arrival CV survives


def test_exported_values_are_rounded_before_validation():
    assert rounded("interactiveRpsThreshold", 7.3456) == 7.3
    assert rounded("interactiveP95LatencyMs", 18_040.2) == 18_000
    assert rounded("windowMs", 40_105.702406000266) == 40_000
    assert rounded("windowMs", 120.0) == 500.0
    assert rounded("smoothingAlpha", 0.333) == 0.35
    assert rounded("batchMaxConcurrency", 14) == 14


def _bursty_log(seed=5):
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.exponential(8000, 80))
    parts = [s + np.sort(rng.exponential(150, rng.integers(5, 40))) for s in starts]
    return np.sort(np.concatenate(parts + [rng.uniform(0, starts[-1], 300)]))


def test_fit_keeps_a_bursty_logs_cv_by_resampling_its_own_arrivals(tmp_path):
    from simlab.calibration.fit import bin_edges, choose_bin, cv_tolerance, fit_arrivals
    from simlab.scenario import scenario_from_dict

    t = _bursty_log()
    cv = np.diff(t).std(ddof=1) / np.diff(t).mean()
    assert cv > 2.5
    span = float(t[-1])
    fit = fit_arrivals(t, span, choose_bin(span, len(t)))
    # no piecewise rate reproduces the log's CV: the closest step's predicted CV is off by more than the tolerance
    assert fit.process == "resampled" and fit.reason in ("rate-varies", "poisson-rejected")
    assert abs(fit.closest_cv - fit.cv) > cv_tolerance(fit.n, fit.cv)
    (tmp_path / "a.csv").write_text("arrival_ms\n" + "".join(f"{float(x)!r}\n" for x in t))
    s = scenario_from_dict({"name": "r", "duration_ms": span, "backend": {"kind": "delay"}, "workload": [
        {"name": "chat", "class": "interactive", "service": {"dist": "constant", "value": 1},
         "arrivals": {"process": "resampled", "file": str(tmp_path / "a.csv"), "block_ms": fit.step_ms}}]})
    cvs = []
    for seed in (1, 2, 3, 4, 5):
        sim = np.array([x.arrival_ms for x in open_loop_tasks(s, seed)])
        g = np.diff(sim)
        cvs.append(g.std(ddof=1) / g.mean())
        assert 0.6 < len(sim) / len(t) < 1.4
    # a piecewise rate got 2.48 here; each resample of ~10 one-minute blocks varies, their mean keeps the CV
    assert abs(np.mean(cvs) - cv) < 0.12 * cv and min(cvs) > 2.5, cvs
    a = [x.arrival_ms for x in open_loop_tasks(s, 1)]
    assert a != [x.arrival_ms for x in open_loop_tasks(s, 2)]  # each seed another resample


def test_diurnal_condition_follows_the_profile_and_keeps_the_mean_load():
    s = small_slots()
    s = s.model_copy(update={"duration_ms": 200_000.0, "conditions": s.conditions.model_copy(update={"diurnal": [0.8]})})
    base, day = conditions_of(s)
    assert day.name == "diurnal-a0.8" and day.kind == "diurnal"
    t0 = np.array([t.arrival_ms for t in open_loop_tasks(base.apply(s), 3) if t.kind == "interactive"])
    t1 = np.array([t.arrival_ms for t in open_loop_tasks(day.apply(s), 3) if t.kind == "interactive"])
    assert abs(len(t1) / len(t0) - 1) < 0.15  # one whole period over the run: the mean rate is kept
    # the profile's peak quarter (sin > 0.7, around t = duration / 4) against its trough (around 3/4)
    peak = np.sum((t1 > 0.125 * 200_000) & (t1 < 0.375 * 200_000))
    trough = np.sum((t1 > 0.625 * 200_000) & (t1 < 0.875 * 200_000))
    assert peak > 3 * trough
    # the batch draws are untouched, and the same seed gives the same arrivals
    a = [(t.id, t.arrival_ms) for t in open_loop_tasks(base.apply(s), 3) if t.kind == "batch"]
    b = [(t.id, t.arrival_ms) for t in open_loop_tasks(day.apply(s), 3) if t.kind == "batch"]
    assert a == b
    assert np.array_equal(t1, [t.arrival_ms for t in open_loop_tasks(day.apply(s), 3) if t.kind == "interactive"])


def test_diurnal_thinning_on_a_trace_keeps_whole_tasks():
    rng = np.random.default_rng(0)
    times = np.sort(rng.uniform(0, 10_000, 4000))
    t, idx, copy = load_and_shift(times, 1.0, 0.0, 10_000, np.random.default_rng(1), (0.5, 10_000, 0.0))
    assert np.all(np.diff(t) >= 0) and 3600 < len(t) < 4400
    first, last = np.sum(t < 5000), np.sum(t >= 5000)  # sin > 0 over the first half-period
    assert first > 1.4 * last
    assert np.allclose(t[copy == 0], times[idx[copy == 0]])


def test_held_out_conditions_never_include_a_searched_one():
    s = small_slots()
    s = s.model_copy(update={"conditions": s.conditions.model_copy(update={"load": [0.5, 2], "search": 2})})
    search, held = split(s)
    assert held and not {c.name for c in search} & {c.name for c in held}
    # a search that would leave nothing held out is refused (it was clamped once, silently)
    s = s.model_copy(update={"conditions": s.conditions.model_copy(update={"search": 3})})
    with pytest.raises(InputError, match=r"is 3, but there are 3 conditions \(base, load-x0.5, load-x2\)"):
        split(s)
    one = small_slots()
    assert split(one) == ([conditions_of(one)[0]], [conditions_of(one)[0]])
