"""Refit the step-time model on open-loop traffic: each request's decode step at the load it actually had.

A closed-loop load test (`simlab loadtest`) prices a prefill token and the server's front end from a few prompt
lengths, and the model draws a straight line through them (admit_ms + per_token_ms x prompt). A real engine's
cost of a request joining the batch need not be a line: on the engine of scripts/real-engine.sh it is about
7 ms at 32 prompt tokens and 34-39 ms from 128 to 1024 (results/reference/real-engine/loadtest-prompts), so a
line through 32 and 1024 under-prices the prompts between them, where a scenario's traffic may be. Refitting
on the traffic itself puts the line where the scenario's prompts are: the decode step and the admission cost
are refitted here on request records of open-loop runs (`simlab validate-real --seed S`: the scenario's
workloads at a seed other than the validated one, so the validation stays held out).

Per completed request (more than 4 output tokens), from `simlab.realcheck.stepcheck.load_during_decode`: its
measured decode step (end - first token) / (output tokens - 1), the mean sequences n in the engine meanwhile,
and the prompt tokens and requests that joined meanwhile, per step. The model is the backend's own:

    step = base + (per_token + per_seq) * n + per_token * joined_tokens + admit * joined

per_token_ms (prefill per token) and request_ms (the front end) are kept from the load-test fit, where two
prompt lengths identify them; base_ms, per_seq_ms and admit_ms are fitted by least squares on relative errors
with a soft-L1 loss: a request slowed by other work on a shared machine should not pull the line. The loss is
minimised by iteratively reweighted non-negative least squares (`soft_l1_fit`), iterated to its fixed point:
an iterative solver stopped by a tolerance (scipy's `least_squares` stops on `ftol` after a few steps here)
lands 1e-8 apart on CPUs with other BLAS kernels, which the committed 6-digit calibration would show.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from simlab.errors import InputError
from simlab.records import OpenLoopRefit, OpenLoopRun

MIN_REQUESTS = 20
F_SCALE = 0.05  # soft-L1: relative errors well beyond 5% count about linearly, not squared


def load_rows(records: list[dict], max_num_seqs: int) -> tuple[np.ndarray, int]:
    """Both classes' requests of one run: (rows of load_during_decode, how many were left out). Left out: a
    request whose decode was not observed (simlab/realcheck/stepcheck.py `streamed`, against the run's median; on
    the real engine, 2 requests of 1,541 in six runs)."""
    from simlab.realcheck.stepcheck import load_during_decode, streamed

    rows = np.vstack([load_during_decode(records, k, max_num_seqs) for k in ("interactive", "batch")])
    keep = streamed(rows)
    return rows[keep], int((~keep).sum())


def refit(fit, runs: dict[str, list[dict]], max_num_seqs: int):
    """(the load-test fit with base_ms, per_seq_ms and admit_ms refitted on the runs' requests, the refit's record).
    `fit` is calibration.gpu.GpuFit; `runs` maps a run's name to its request records."""
    from simlab.calibration.gpu import score
    from simlab.realcheck.stepcheck import model_step

    loaded = {name: load_rows(recs, max_num_seqs) for name, recs in runs.items()}
    per_run = {name: r for name, (r, _) in loaded.items()}
    unstreamed = sum(k for _, k in loaded.values())
    rows = np.vstack(list(per_run.values())) if per_run else np.empty((0, 5))
    if len(rows) < MIN_REQUESTS:
        raise InputError(None, "--open-loop", f"the runs hold {len(rows)} completed requests with more than 4 "
                         f"output tokens; the refit needs at least {MIN_REQUESTS}")
    n, measured, tokens, joined = rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4]
    pt = fit.per_token_ms
    known = pt * (n + tokens)

    # relative errors: (base + per_seq n + admit joined + known) / measured - 1, linear in the three
    A = np.column_stack([np.ones_like(n), n, joined]) / measured[:, None]
    theta = soft_l1_fit(A, (measured - known) / measured, F_SCALE)
    theta = np.where(np.abs(theta) < 1e-9, 0.0, theta)
    new = dataclasses.replace(fit, base_ms=float(theta[0]), per_seq_ms=float(theta[1]), admit_ms=float(theta[2]),
                              profile=[], notes=fit.notes + ["open-loop-refit"],
                              label=fit.label + f" + {len(runs)} open-loop run(s)")
    score(new)

    def errors(step, r):  # a GpuFit carries the step model's four coefficients under the backend's names
        return model_step(step, r[:, 1], r[:, 3], r[:, 4]) / r[:, 2] - 1

    nan = float("nan")
    run_errors = [OpenLoopRun(name, len(r), float(r[:, 1].mean()) if len(r) else nan,
                                      float(np.median(errors(fit, r))) if len(r) else nan,
                                      float(np.median(errors(new, r))) if len(r) else nan)
                  for name, r in per_run.items()]
    report = OpenLoopRefit(fit.parameters, fit.mean_rel_error, len(rows), unstreamed, run_errors,
                                   float(np.mean(np.abs(errors(fit, rows)))), float(np.mean(np.abs(errors(new, rows)))))
    return new, report


def soft_l1_fit(A: np.ndarray, b: np.ndarray, f_scale: float, max_iter: int = 500) -> np.ndarray:
    """argmin over x >= 0 of sum(rho(((A x - b) / f_scale)^2)) with rho(z) = 2 (sqrt(1 + z) - 1), scipy's
    "soft_l1", by iteratively reweighted least squares: at the minimum, x solves the non-negative least squares
    problem weighted by rho'(z) = 1 / sqrt(1 + z) at x itself, so iterate that (exact active-set solves) until x
    stops moving in its last bits.

    >>> A = np.column_stack([np.ones(5), np.arange(5.0)])
    >>> [round(float(v), 9) for v in soft_l1_fit(A, 1 + 2 * np.arange(5.0), 0.05)]
    [1.0, 2.0]
    """
    from scipy import optimize

    x = optimize.lsq_linear(A, b, bounds=(0, np.inf), method="bvls").x
    for _ in range(max_iter):
        z = (A @ x - b) / f_scale
        w = np.sqrt(1 / np.sqrt(1 + z * z))
        new = optimize.lsq_linear(A * w[:, None], b * w, bounds=(0, np.inf), method="bvls").x
        if np.all(np.abs(new - x) <= 1e-15 * np.maximum(np.abs(x), 1e-12)):
            return new
        x = new
    return x


def read_runs(paths: list[str | Path]) -> dict[str, list[dict]]:
    """Request records per run, named by file name (by its last three path parts when two names collide)."""
    from simlab.realcheck.measures import read_records

    paths = [Path(p) for p in paths]
    names = [p.name for p in paths]
    if len(set(names)) < len(names):  # open-loop-a/measured/x.csv and open-loop-b/measured/x.csv
        names = [str(Path(*p.parts[-3:])) for p in paths]
    return {name: read_records(p) for name, p in zip(names, paths)}
