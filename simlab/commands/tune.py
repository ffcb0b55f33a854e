"""`simlab tune`: search the adaptive policy's options with Optuna, validate on held-out seeds, export them."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from simlab.commands.common import (
    both_classes, bound_warning, capacity_check, out_dir, positive, scenario_options, warn,
)
from simlab.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("tune", help="tune thresholds, window and smoothing with Optuna; export best-options.json")
    p.add_argument("scenario", help="scenario TOML file; its [tune] table sets the search (see README)")
    p.add_argument("--trials", type=int, help="total trials in the study (default: [tune] trials); a rerun continues")
    p.add_argument("--workers", type=int, default=1, help="processes evaluating trials (results do not depend on it)")
    p.add_argument("--out", help="output folder (default results/SCENARIO/tune)")
    p.add_argument("--storage", help="Optuna storage URL (default: sqlite:///OUT/study.db; postgresql://... to scale out)")
    p.add_argument("--study", help="study name (default: the scenario's name)")
    p.add_argument("--options", help="production options to start from (default: the scenario's [scheduler])")
    p.add_argument("--objective", choices=["p95", "p99"], help="minimise interactive P95 or P99 (default: [tune])")
    p.add_argument("--mode", choices=["single", "multi"], help="single objective, or a P95 vs throughput Pareto front")
    p.add_argument("--join", action="store_true",
                   help="join a shared study as one more worker (many machines on PostgreSQL; not reproducible)")
    p.add_argument("--force", action="store_true",
                   help="export best-options.json even when no policy can meet the SLO on this traffic")
    p.add_argument("--calibration", help="a `simlab calibrate` output folder (or its tune-bounds.json): its knee sets the "
                   "threshold ranges, unless [tune.bounds] sets them")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    both_classes(scenario, "tune")
    if getattr(args, "calibration", None):
        scenario = with_calibration(scenario, args.calibration)
    return run(scenario, args)[0]


def with_calibration(scenario, where: str):
    """The scenario with calibrate's threshold ranges in [tune.bounds] (the scenario's own bounds win)."""
    from simlab.errors import CONFIG_MAX_BYTES, read_text

    path = Path(where)
    path = path / "tune-bounds.json" if path.is_dir() else path
    try:
        ranges = json.loads(read_text(path, "calibration file", "tune-bounds.json from `simlab calibrate`", CONFIG_MAX_BYTES))
        bounds = {str(k): (float(v[0]), float(v[1])) for k, v in ranges.items()}
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise InputError(path, None, f"not a tune-bounds.json written by `simlab calibrate` ({exc})") from None
    merged = {**bounds, **scenario.tune.bounds}
    try:
        tune = type(scenario.tune).model_validate({**scenario.tune.model_dump(), "bounds": merged})
    except Exception as exc:
        raise InputError(path, "bounds", str(exc).splitlines()[-1]) from None
    return scenario.model_copy(update={"tune": tune})


def run(scenario, args) -> tuple[int, dict | None]:
    """Tune, validate, export; (exit code, the chosen configuration's validation summary row)."""
    cap = capacity_check(scenario, announce=not getattr(args, "capacity_checked", False))
    from simlab.experiments.runner import Job, run_jobs
    from simlab.tuning.report import figures, write_best, write_report, write_tables
    from simlab.tuning.space import build_space
    from simlab.tuning.study import TuneContext, join, optimize, refuse_changed_study
    from simlab.tuning.validation import choose, validate

    started = time.perf_counter()
    changes = {k: v for k, v in (("objective", args.objective), ("mode", args.mode)) if v is not None}
    if changes:
        scenario = scenario.model_copy(update={"tune": scenario.tune.model_copy(update=changes)})
    tune = scenario.tune
    n_trials = positive(args.trials if args.trials is not None else tune.trials, "--trials")
    workers = positive(args.workers, "--workers")
    base = scenario_options(scenario, args.options, "adaptive")
    space = build_space(scenario, base)
    out = out_dir(args, scenario, "tune")
    out.mkdir(parents=True, exist_ok=True)
    storage = args.storage or f"sqlite:///{(out / 'study.db').resolve()}"
    seeds = list(range(tune.first_seed, tune.first_seed + tune.seeds))
    progress = not args.quiet

    from simlab.world.conditions import split

    search_conds, held_conds = split(scenario)
    ctx = TuneContext(scenario, base, space, storage, args.study or scenario.name, seeds,
                      search_worlds=[(c.name, c.apply(scenario)) for c in search_conds],
                      holdout_worlds=[(c.name, c.apply(scenario)) for c in held_conds])
    for name, world in ctx.holdout_worlds:  # held-out conditions may carry more load than the scenario itself
        if name != "base" and not getattr(args, "capacity_checked", False):
            capacity_check(world, label=f"held-out condition {name}")
    ctx.identity = {
        "simlab_objective": f"{tune.mode}:{tune.objective}",
        "simlab_scenario": scenario.name,
        **_setup_identity(scenario, base, space, seeds),
    }
    if len(ctx.search_worlds) > 1 or ctx.search_worlds[0][0] != "base":
        ctx.identity["simlab_search_conditions"] = ",".join(n for n, _ in ctx.search_worlds)
    refuse_changed_study(ctx)  # before any work: a study made from other inputs is never resumed

    # The reference arm's batch throughput on the search seeds: the constraint's yardstick; and the interactive
    # P95 with batch absent, the floor no options can go below.
    reference = base.with_changes(policy=tune.reference)
    ref, bounds = [], []
    for name, world in ctx.worlds():
        jobs = [Job("reference", reference, s) for s in seeds]
        if {w.kind for w in scenario.workload} == {"interactive", "batch"}:
            jobs += [Job("bound-no-batch", base.with_changes(policy="unscheduled"), s, "no-batch") for s in seeds]
        folder = out / "search" if len(ctx.worlds()) == 1 and name == "base" else out / "search" / name
        ran = run_jobs(world, jobs, folder, workers, progress)
        ref += ran[: len(seeds)]
        bounds += ran[len(seeds):]
    ctx.reference_throughput = sum(m["batch_throughput_per_min"] for m in ref) / len(ref)
    ctx.reference_per_seed = [m["batch_throughput_per_min"] for m in ref]  # pairs the constraint per unit
    floor = bound_warning(scenario, bounds)
    if floor is not None:
        warn(floor)
    unreachable = cap.slo_unreachable or floor is not None
    bar = _progress_bar(n_trials, ctx) if progress else None
    try:
        study = (join if args.join else optimize)(ctx, n_trials, **({} if args.join else {"workers": workers}), progress=bar)
    finally:
        if bar is not None:
            bar.close()

    candidates, note = choose(ctx, study)
    rows, summary = validate(ctx, candidates, out, workers, progress)
    refuse = unreachable and not args.force
    pick = None if refuse else write_best(out, summary, ctx.multi)
    write_tables(ctx, study, out, rows, summary)
    figs = figures(ctx, study, out)
    record = write_report(ctx, study, out, summary, note, pick, figs, time.perf_counter() - started)
    _print_summary(record, out, time.perf_counter() - started)
    if refuse:
        raise InputError(
            scenario.path, "slo_p95_ms",
            f"no policy can meet the SLO ({scenario.slo_p95_ms:,.0f} ms) on this traffic (see the capacity warning "
            f"above), so no options were exported. The study, trials and report are kept in {out}; fix the "
            "capacity or the SLO, or rerun with --force to export the best options anyway.",
        )
    if pick is not None and not pick["meets_constraint"]:
        from simlab.tuning.report import CANDIDATE_FILE

        print(f"\nnot exported: the chosen options miss the batch-throughput constraint on held-out seeds "
              f"(paired margin's lower CI bound {pick['throughput_margin_ci_low']:,.1f}/min < 0); "
              f"candidate written to {out}/{CANDIDATE_FILE}", file=sys.stderr)
        return 3, pick
    return 0, pick


def _setup_identity(scenario, base, space, seeds) -> dict[str, str]:
    """What makes two studies comparable: everything but the number of trials, including the bytes of every
    file the scenario reads and simlab's code (a resumed study must not mix trials of different inputs)."""
    from simlab import fingerprint

    return fingerprint.identity(scenario, {"base": base.to_json_dict(), "space": space.bounds, "seeds": seeds},
                                drop_tune=("trials",))


class _progress_bar:
    """tqdm over finished trials, showing the best feasible value so far."""

    def __init__(self, total, ctx):
        from tqdm import tqdm

        self.ctx = ctx
        self.bar = tqdm(total=total, desc="trials", unit="trial")
        self.seen = 0

    def __call__(self, study) -> None:
        from simlab.tuning.validation import completed, feasible

        done = completed(study)
        self.bar.update(max(0, min(len(done), self.bar.total) - self.bar.n))
        ok = [t.values[0] for t in done if feasible(t)]
        if ok:
            self.bar.set_postfix_str(f"best {self.ctx.tune.objective} {min(ok):,.0f} ms")

    def close(self):
        self.bar.close()


def _print_summary(record, out: Path, elapsed: float) -> None:
    from simlab.experiments.tables import text_table
    from simlab.tuning.report import validation_table

    print(f"{record.scenario}: held-out {record.metric} on {len(record.holdout_seeds)} fresh seeds (95% CI)\n")
    table = validation_table(record)
    print(text_table(table.header, [[c.line() for c in row] for row in table.rows]))
    if record.note:
        print(f"\nnote: {record.note}")
    print("\nverdict: " + record.decision.headline.replace("**", ""))
    if record.best_options is not None:
        print(f"\nbest options: {out}/best-options.json")
    print(f"report: {out}/report.md  record: {out}/result.json  trials: {out}/trials.csv  ({elapsed:.1f} s)")
