"""GPU profile calibration for the `continuous-batching` backend: fit its step-time model to a load test.

The backend's iteration takes `base_ms + per_token_ms * tokens + per_seq_ms * sequences + admit_ms * admitted`
(tokens: the prompt tokens of the sequences in prefill plus one per decoding sequence; admitted: the sequences
whose prefill runs in it), and a request reaches the engine
`request_ms` after it is sent (the server's front end: HTTP, validation, hand-off to the engine process; it
holds no sequence slot; the backend serves the front end one request at a time, which a closed-loop load test,
whose requests come one by one, hardly ever queues, so the formulas below leave that queueing out). A load test run at a fixed concurrency (or batch size) C with prompts of P tokens
and O output tokens gives, per row, any of:

| column (any of these names) | what | model (steady state: C sequences always running) |
|---|---|---|
| step_ms, decode_step_ms | one decode-only iteration | base + (per_token + per_seq) * C |
| tpot_ms, itl_ms, mean_tpot_ms, mean_itl_ms | time per output token | base + per_token * k + per_seq * C + admit * (C-1)/O |
| ttft_ms, mean_ttft_ms | time to first token | request + base + per_token * (P + (C-1) * m) + per_seq * C + admit * (1 + (C-1)/O) + w |
| latency_ms, e2e_latency_ms, e2el_ms, mean_e2el_ms | end-to-end | ttft + (O-1) * tpot |
| output_tokens_per_s, output_throughput | server output tokens/s | C * O / latency |
| request_tokens_per_s | one request's decode speed | 1000 / tpot |

with m = 1 + (P-1)/O (a sequence decodes one token per iteration and prefills its P tokens once every O
iterations), k = 1 + (C-1) * m, and w = (1 - 1/C) / 2 * tpot (a request arriving at a busy server waits on
average about half an iteration). Checked against simlab's own continuous-batching backend driven by a
closed loop with varied lengths: tpot and latency within about 1-2%, TTFT within about 20% (the wait for an
iteration boundary varies with how arrivals line up). If a load test's requests stay in lockstep (identical
lengths started together), TTFT includes every prompt's prefill and TPOT none: only latency is then reliable. The batch size column is `batch_size`, `concurrency`, `num_seqs` or
`max_concurrency`; P and O are the columns `prompt_tokens`/`input_tokens` and `output_tokens` (or
`--prompt-tokens`, `--output-tokens` for every row). Without P and O, tpot and throughput rows are read as
decode-only steps.

Every row is linear in (base_ms, per_token_ms, per_seq_ms, request_ms, admit_ms): the fit is a non-negative
least-squares (`scipy.optimize.lsq_linear`, its exact active-set method: the solution does not depend on where an
iterative solver stops, so another CPU gives the same digits) on relative errors, so rows of different sizes count
alike.
request_ms is fitted only from rows that see it (TTFT, latency, throughput with known lengths), else it is 0.
admit_ms is fitted only when the table has at least two output lengths: with one, a request's own cost and
a sequence's are nearly collinear (a sequence joins once every O iterations), so it is 0 and per_seq_ms
carries it.
When the table cannot tell per-token from per-sequence cost (decode-only rows, one prompt length, no TTFT),
per_token_ms is fixed (`--per-token-ms`, else 0) and the rest goes to per_seq_ms, with a warning.

Outputs: the fitted parameters as a `[backend.step]` TOML snippet, the fit error (R^2 per measurement,
mean and largest relative error, every row's prediction), and `step-profile.csv` (`batch_size,step_ms`: the
measured decode step per batch size, the backend's `step.profile` for an interpolated step time instead of
the straight line).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simlab import records
from simlab.errors import CONFIG_MAX_BYTES, InputError, read_text
from simlab.store import significant

BATCH_NAMES = ("batch_size", "concurrency", "num_seqs", "max_concurrency", "batch")
PROMPT_NAMES = ("prompt_tokens", "input_tokens", "input_len", "prompt_len")
OUTPUT_NAMES = ("output_tokens", "output_len", "max_tokens")
MEASURES = {
    "step": ("step_ms", "decode_step_ms"),
    "tpot": ("tpot_ms", "itl_ms", "mean_tpot_ms", "mean_itl_ms"),
    "ttft": ("ttft_ms", "mean_ttft_ms"),
    "latency": ("latency_ms", "e2e_latency_ms", "e2el_ms", "mean_e2el_ms"),
    "throughput": ("output_tokens_per_s", "output_throughput", "throughput_tokens_per_s"),
    "request_rate": ("request_tokens_per_s",),
}
MEASURE_LABELS = {
    "step": "decode step (ms)",
    "tpot": "time per output token (ms)",
    "ttft": "time to first token (ms)",
    "latency": "end-to-end latency (ms)",
    "throughput": "output tokens/s (server)",
    "request_rate": "tokens/s per request",
}
MIN_ROWS = 3


@dataclass
class Row:
    line: int | str  # the table's line; "table:line" when several tables are fitted together
    kind: str  # a key of MEASURES
    c: float
    p: float | None
    o: float | None
    value: float  # as measured (ms, or tokens/s)

    def regressors(self) -> tuple[np.ndarray, float]:
        """(a, y): the model is a . (base, per_token, per_seq, request, admit) = y, y in ms."""
        c, p, o = self.c, self.p, self.o
        known = p is not None and o is not None
        m = 1 + (p - 1) / o if known else 1.0
        k = 1 + (c - 1) * m
        step = np.array([1.0, c, c, 0.0, 0.0])
        # the others join once every O iterations each: (C-1)/O admissions per iteration of this request
        tpot = np.array([1.0, k, c, 0.0, (c - 1) / o]) if known else step
        if self.kind == "step":
            return step, self.value
        if self.kind == "tpot":
            return tpot, self.value
        if self.kind == "request_rate":
            return tpot, 1000.0 / self.value
        # its own prefill iteration, after waiting on average half of the iteration running when it arrives
        ttft = np.array([1.0, p + (c - 1) * m, c, 1.0, 1 + (c - 1) / o]) + 0.5 * (1 - 1 / c) * tpot if known else None
        if self.kind == "ttft":
            return ttft, self.value
        latency = ttft + (o - 1) * tpot if known else None
        if self.kind == "latency":
            return latency, self.value
        if self.kind == "throughput":
            if known:
                return latency, 1000.0 * c * o / self.value
            return step, 1000.0 * c / self.value
        raise ValueError(self.kind)

    def predict(self, theta: np.ndarray, profile: tuple[list, list] | None = None) -> float:
        """The row's value under theta; with a profile (batch sizes, decode step ms), the decode-only step
        base + (per_token + per_seq) * C is the profile's, interpolated, as the backend's `step.profile` does."""
        a, _ = self.regressors()
        ms = float(a @ theta)
        if profile is not None:  # a[0] counts the iterations the row spans
            ms += float(a[0] * (np.interp(self.c, *profile) - (theta[0] + (theta[1] + theta[2]) * self.c)))
        if self.kind == "request_rate":
            return 1000.0 / ms
        if self.kind == "throughput":
            known = self.p is not None and self.o is not None
            return 1000.0 * self.c * (self.o if known else 1.0) / ms
        return ms


@dataclass
class GpuFit:
    path: Path
    rows: list[Row]
    base_ms: float
    per_token_ms: float
    per_seq_ms: float
    request_ms: float
    admit_ms: float
    identifiable: bool
    r2: dict[str, float]
    mean_rel_error: float
    max_rel_error: float
    profile: list[tuple[int, float]]  # (batch size, decode step ms)
    notes: list[str] = field(default_factory=list)  # records.GPU_NOTES
    label: str = ""  # the table(s) fitted, for titles

    @property
    def theta(self) -> np.ndarray:
        return np.array([self.base_ms, self.per_token_ms, self.per_seq_ms, self.request_ms, self.admit_ms])

    @property
    def parameters(self) -> records.StepParameters:
        return records.StepParameters(self.base_ms, self.per_token_ms, self.per_seq_ms, self.request_ms, self.admit_ms)

    def predictions(self) -> list[records.Prediction]:
        out = []
        for r in self.rows:
            pred = r.predict(self.theta)
            out.append(records.Prediction(r.line, r.kind, r.c, r.p, r.o, r.value, pred, (pred - r.value) / r.value))
        return out

    def record(self, tables: list[str], open_loop: records.OpenLoopRefit | None = None,
               check: records.HeldOutCheck | None = None) -> records.GpuFitRecord:
        """The fit as `simlab calibrate-gpu` stores and renders it."""
        return records.GpuFitRecord(
            label=self.label, tables=list(tables), parameters=self.parameters, identifiable=self.identifiable,
            mean_rel_error=self.mean_rel_error, max_rel_error=self.max_rel_error,
            r2=[records.MeasureFit(k, v) for k, v in self.r2.items()], predictions=self.predictions(),
            profile=[records.ProfilePoint(c, d) for c, d in self.profile], joins=join_costs(self),
            notes=list(self.notes), open_loop=open_loop, check=check,
            profile_file="step-profile.csv" if self.profile else None)


def _find(header_lower: dict[str, str], names) -> str | None:
    for n in names:
        if n in header_lower:
            return header_lower[n]
    return None


def read_table(path: str | Path, prompt_tokens: float | None = None, output_tokens: float | None = None) -> list[Row]:
    path = Path(path)
    text = read_text(path, "load-test table", "a CSV table", CONFIG_MAX_BYTES)
    if not text.strip():
        raise InputError(path, None, "empty file (expected a CSV with batch_size or concurrency and a measurement)")
    try:
        rows = [(i, r) for i, r in enumerate(csv.reader(io.StringIO(text)), start=1) if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise InputError(path, None, f"not a valid CSV ({exc})") from None
    header = [h.strip() for h in rows[0][1]]
    lower = {h.lower(): h for h in reversed(header)}
    batch = _find(lower, BATCH_NAMES)
    if batch is None:
        raise InputError(path, "header", f"no batch size column (expected one of {', '.join(BATCH_NAMES)}); "
                                         f"found {', '.join(header)}")
    measures = {k: c for k, names in MEASURES.items() if (c := _find(lower, names)) is not None}
    if not measures:
        known = [n for names in MEASURES.values() for n in names]
        raise InputError(path, "header", f"no measurement column (expected any of {', '.join(known)}); found {', '.join(header)}")
    pcol, ocol = _find(lower, PROMPT_NAMES), _find(lower, OUTPUT_NAMES)
    idx = {h: i for i, h in enumerate(header)}
    out: list[Row] = []

    def number(row, col, line, what, positive=True, allow_empty=False):
        i = idx[col]
        cell = row[i].strip() if i < len(row) else ""
        if cell == "" and allow_empty:
            return None
        try:
            v = float(cell)
        except ValueError:
            raise InputError(path, f"line {line}", f"{col} {cell!r} is not a number (expected the {what})") from None
        if not math.isfinite(v) or (positive and v <= 0):
            raise InputError(path, f"line {line}", f"{col} {cell!r} must be a positive number (the {what})")
        return v

    for line, row in rows[1:]:
        if len(row) != len(header):
            raise InputError(path, f"line {line}", f"has {len(row)} fields, the header has {len(header)}")
        c = number(row, batch, line, "batch size or concurrency")
        if c < 1:
            raise InputError(path, f"line {line}", f"{batch} must be at least 1 (found {c:g})")
        p = number(row, pcol, line, "prompt tokens") if pcol else prompt_tokens
        o = number(row, ocol, line, "output tokens") if ocol else output_tokens
        if o is not None and o < 1:
            raise InputError(path, f"line {line}", f"output tokens must be at least 1 (found {o:g})")
        for kind, col in measures.items():
            v = number(row, col, line, MEASURE_LABELS[kind].replace(" (ms)", " in ms"), allow_empty=True)
            if v is None:
                continue
            if kind in ("ttft", "latency") and (p is None or o is None):
                raise InputError(path, f"line {line}", f"{col} needs the prompt and output lengths: add "
                                                       "prompt_tokens and output_tokens columns, or give "
                                                       "--prompt-tokens and --output-tokens")
            out.append(Row(line, kind, c, p, o, v))
    if len(out) < MIN_ROWS:
        raise InputError(path, None, f"only {len(out)} measurement(s): at least {MIN_ROWS} are needed to fit "
                                     "base_ms, per_token_ms and per_seq_ms")
    if len({r.c for r in out}) < 2:
        raise InputError(path, None, "every row has the same batch size: measure at least two concurrencies")
    return out


def _r2(measured: np.ndarray, fitted: np.ndarray) -> float:
    ss_res = float(np.sum((measured - fitted) ** 2))
    ss_tot = float(np.sum((measured - measured.mean()) ** 2))
    return 1 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else -math.inf)


def fit_gpu(rows: list[Row], path: str | Path = "table", per_token_ms: float | None = None,
            label: str | None = None) -> GpuFit:
    from scipy import optimize

    A = np.array([r.regressors()[0] for r in rows])
    y = np.array([r.regressors()[1] for r in rows])
    W = A / y[:, None]  # relative errors
    notes = []
    free = [0, 1, 2] + ([3] if np.any(A[:, 3] != 0) else [])  # request_ms only where some row sees it
    if len({r.o for r in rows if r.p is not None and r.o is not None and r.kind != "step"}) >= 2:
        free.append(4)  # admit_ms: only several output lengths tell it from per_seq_ms
    sv = np.linalg.svd(W[:, free], compute_uv=False)
    identifiable = bool(sv[-1] > 1e-6 * sv[0]) and per_token_ms is None
    theta = np.zeros(5)
    if identifiable:
        theta[free] = optimize.lsq_linear(W[:, free], np.ones(len(y)), bounds=(0, np.inf), method="bvls").x
    else:
        fixed = per_token_ms if per_token_ms is not None else 0.0
        if per_token_ms is None:
            notes.append("not-identifiable")  # per_token_ms 0: the per-sequence slope carries both costs
        else:
            notes.append("per-token-fixed")
        y2 = y - fixed * A[:, 1]
        if np.any(y2 <= 0):
            raise InputError(path, None, f"--per-token-ms {fixed:g} alone exceeds some measurements")
        rest = [i for i in free if i != 1]
        theta[rest] = optimize.lsq_linear(A[:, rest] / y[:, None], y2 / y, bounds=(0, np.inf), method="bvls").x
        theta[1] = fixed
    theta = np.where(np.abs(theta) < 1e-9, 0.0, theta)  # solver dust
    fit = GpuFit(Path(path), rows, *(float(v) for v in theta), identifiable, {}, 0.0, 0.0, [], notes,
                 label or Path(path).name)
    score(fit)
    fit.profile = decode_profile(rows, fit)
    if theta[0] + theta[1] + theta[2] <= 0:
        raise InputError(path, None, "the fit gives a step of zero time: check the table's units (ms, tokens/s)")
    return fit


def score(fit: GpuFit) -> None:
    """The fit's error on its own rows: mean and largest relative error, R^2 per measure (set on `fit`)."""
    preds = fit.predictions()
    rel = np.array([abs(p.relative_error) for p in preds])
    fit.mean_rel_error = float(rel.mean())
    fit.max_rel_error = float(rel.max())
    fit.r2 = {}
    for kind in MEASURES:
        sel = [p for p in preds if p.measure == kind]
        if len(sel) >= 2:
            fit.r2[kind] = _r2(np.array([p.measured for p in sel]), np.array([p.fitted for p in sel]))


def join_costs(fit: GpuFit) -> list[records.JoinCost]:
    """What one request joining costs the running ones, per (concurrency C > 1, prompt length P) measured at two
    output lengths O1 < O2: the others join (C-1)/O times per iteration, so the difference of the time per
    output token gives cost = (tpot(O1) - tpot(O2)) / ((C-1)/O1 - (C-1)/O2). The model's is
    admit_ms + per_token_ms * (P - 1), a straight line in P: where the measured costs bend, the line misprices
    prompts between the load test's lengths."""
    by: dict[tuple[float, float], dict[float, list[float]]] = {}
    for r in fit.rows:
        if r.kind == "tpot" and r.p is not None and r.o is not None and r.c > 1:
            by.setdefault((r.c, r.p), {}).setdefault(r.o, []).append(r.value)
    out = []
    for (c, p), outs in sorted(by.items()):
        if len(outs) < 2:
            continue
        o1, o2 = min(outs), max(outs)
        dt = float(np.mean(outs[o1]) - np.mean(outs[o2]))
        out.append(records.JoinCost(c, p, o1, o2, dt / ((c - 1) / o1 - (c - 1) / o2),
                                    fit.admit_ms + fit.per_token_ms * (p - 1)))
    return out


def decode_profile(rows: list[Row], fit: GpuFit) -> list[tuple[int, float]]:
    """The measured decode-only step per batch size (the others' interleaved prefills taken out with the
    fitted per_token_ms), for the backend's `step.profile`."""
    by_c: dict[int, list[float]] = {}
    ttft = {r.line: r.value for r in rows if r.kind == "ttft"}
    for r in rows:
        known = r.p is not None and r.o is not None
        prefill_share = ((fit.per_token_ms * (r.p - 1) + fit.admit_ms) * (r.c - 1) / r.o) if known else 0.0
        if r.kind == "step":
            d = r.value
        elif r.kind == "tpot":
            d = r.value - prefill_share
        elif r.kind == "request_rate":
            d = 1000.0 / r.value - prefill_share
        elif r.kind == "throughput" and not known:
            d = 1000.0 * r.c / r.value
        elif r.kind == "latency" and r.line in ttft and r.o > 1:
            d = (r.value - ttft[r.line]) / (r.o - 1) - prefill_share
        else:
            continue
        if d > 0 and float(r.c).is_integer():
            by_c.setdefault(int(r.c), []).append(d)
    return [(c, float(np.mean(v))) for c, v in sorted(by_c.items())]


def step_lines(p: records.StepParameters) -> list[str]:
    """The fitted [backend.step] keys, at the results' precision (another CPU's last bits change nothing)."""
    keys = ["base_ms", "per_token_ms", "per_seq_ms", "request_ms"] + (["admit_ms"] if p.admit_ms else [])
    return [f"{k} = {significant(getattr(p, k))!r}" for k in keys]


def step_toml(r: records.GpuFitRecord) -> str:
    """step.toml: the fitted [backend.step] with a comment on where it comes from and its error."""
    r2 = ", ".join(f"{MEASURE_LABELS[m.measure]} {m.r2:.4f}" for m in r.r2)
    lines = [
        f"# Fitted by `simlab calibrate-gpu` from {r.label} ({len(r.predictions)} measurements).",
        f"# Fit error: mean |relative error| {r.mean_rel_error:.1%}, largest {r.max_rel_error:.1%}; R^2: {r2 or 'n/a'}.",
        "# Paste under a continuous-batching [backend] (kind = \"continuous-batching\", max_num_seqs = ...).",
        "[backend.step]",
    ] + step_lines(r.parameters)
    if r.profile_file:
        lines.append(f"# profile = \"{r.profile_file}\"  # the measured decode step per batch size, interpolated "
                     "(per_token_ms still prices prefill)")
    return "\n".join(lines) + "\n"


def backend_toml(r: records.GpuFitRecord, max_num_seqs: int, profile_path: str | None) -> str:
    """The fitted continuous-batching backend as a scenario snippet (what `simlab loadtest` prints)."""
    lines = [
        f"# Fitted by simlab from {r.label} ({len(r.predictions)} measurements); fit error: mean "
        f"{r.mean_rel_error:.1%}, largest {r.max_rel_error:.1%}.",
        "[backend]",
        'kind = "continuous-batching"',
        f"max_num_seqs = {max_num_seqs}",
        "[backend.step]",
    ] + step_lines(r.parameters)
    if profile_path and r.profile:
        lines.append(f'# profile = "{profile_path}"  # optional: the measured decode step by sequences in flight, '
                     "interpolated, instead of base + per_seq (noisier on a busy machine)")
    return "\n".join(lines) + "\n"


def held_out_check(fit: GpuFit, check: list[Row], table: str = "",
                   tolerance: float = 0.10) -> records.HeldOutCheck:
    """The fitted model against an independent load test of the same server (rows the fit never saw), and the
    noise floor: the same measurement (measure, concurrency, prompt, output) in both tables. Both step models are
    checked: the straight line (base + per_seq * C) and, where the fit table has two or more batch sizes, its
    measured decode profile interpolated (`*_profile`). `rows`: every check row (measured, fitted, error; `retest` =
    the fit table's value for the same level); `by_concurrency`: per measure and concurrency, mean |error| and
    whether every row is within tolerance."""
    first = {(r.kind, r.c, r.p, r.o): r.value for r in fit.rows}
    profile = tuple(map(list, zip(*fit.profile))) if len(fit.profile) >= 2 else None
    rows, groups = [], {}
    for r in check:
        pred = r.predict(fit.theta)
        again = first.get((r.kind, r.c, r.p, r.o))
        with_profile = r.predict(fit.theta, profile) if profile is not None else None
        row = records.CheckRow(r.kind, r.c, r.p, r.o, r.value, pred, (pred - r.value) / r.value, with_profile,
                               None if with_profile is None else (with_profile - r.value) / r.value, again,
                               None if again is None else (r.value - again) / again)
        rows.append(row)
        groups.setdefault((r.kind, r.c), []).append(row)
    by_c = []
    for (k, c), group in sorted(groups.items()):
        e = [abs(x.relative_error) for x in group]
        g = records.CheckGroup(k, c, float(np.mean(e)), float(max(e)), bool(max(e) <= tolerance))
        if profile is not None:
            e = [abs(x.relative_error_profile) for x in group]
            g.mean_abs_error_profile, g.max_abs_error_profile = float(np.mean(e)), float(max(e))
            g.within_profile = bool(max(e) <= tolerance)
        by_c.append(g)
    diffs = [abs(r.retest_difference) for r in rows if r.retest_difference is not None]
    mean = float(np.mean([abs(r.relative_error) for r in rows])) if rows else math.nan
    mean_profile = (float(np.mean([abs(r.relative_error_profile) for r in rows]))
                    if profile is not None and rows else None)
    return records.HeldOutCheck(str(table), tolerance, rows, by_c, mean, mean_profile,
                                float(np.mean(diffs)) if diffs else None)
