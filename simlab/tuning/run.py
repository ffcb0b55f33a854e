"""`run_tune`: search the adaptive policy's options with Optuna, validate the pick on held-out traffic, and return
the TuneRecord (written to the output folder with its tables, figures and report).

Inside `simlab decide` (validate=False) the held-out check is decide's own: the search's picks come back as
candidates (the record's `candidates`) and nothing is exported from the tune folder but `tuned-candidate.json`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from simlab.errors import InputError
from simlab.experiments.runner import pooled
from simlab.policies import SchedulerOptions
from simlab.records import TuneRecord
from simlab.scenario import Scenario

if TYPE_CHECKING:
    from simlab.tuning.study import TuneContext


def check_units(scenario) -> None:
    """The search needs two units (seeds x search conditions) at least: the rule's paired tests cannot show a trial
    feasible on one. Checked before any folder is made."""
    from simlab.world.conditions import split

    n_seeds, n_conds = scenario.tune.seeds, len(split(scenario)[0])
    if n_seeds * n_conds < 2:
        raise InputError(scenario.path, "tune.seeds",
                         f"the search needs at least 2 units (seeds x search conditions) for the rule's paired tests; "
                         f"found {n_seeds} seed x {n_conds} condition: no trial could ever be shown to meet the "
                         "throughput constraint")


class Refused(InputError):
    """No policy can meet the SLO on this traffic, so nothing was exported; `record` is the study's record, for the
    caller to render before it reports the error."""

    def __init__(self, record: TuneRecord, source, where, message):
        super().__init__(source, where, message)
        self.record = record

    def __reduce__(self):
        return (InputError, (self.source, self.where, self.message))


def quiet_optuna() -> None:
    """Optuna's per-trial log lines and its experimental / deprecation warnings stay out of simlab's output (the
    sampler's own `constraints_func` warning is silenced where it is built, simlab/tuning/study.py)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"optuna\.")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"optuna\.importance")
    # a default outside the searched range: said once in simlab's words (`_say_outside`), not once per trial
    warnings.filterwarnings("ignore", message=r"Fixed parameter .* is out of range", category=UserWarning)


@dataclass
class _Baseline:
    """What every search on the same search units reads: the reference arm's and the batch-absent runs there
    ((label, condition, seed) -> metrics), and what capacity says of the traffic."""
    ran: dict
    unreachable: bool  # no policy can meet the SLO at this capacity (simlab/experiments/capacity.py)
    above: bool  # with batch work absent, interactive P95 is already above the SLO


@dataclass
class _Setup:
    """What a search knows before its first trial: its context, budget, folder and baseline."""
    ctx: TuneContext
    n_trials: int
    out: Path
    baseline: _Baseline


@pooled
def run_tune(scenario: Scenario, base: SchedulerOptions, out: Path, *, trials: int | None = None, workers: int = 1,
             storage: str | None = None, study: str | None = None, objective: str | None = None,
             mode: str | None = None, join: bool = False, progress: bool = True, force: bool = False,
             validate: bool = True, warn: Callable[[str], None] | None = None,
             family: str = "adaptive", search_runs: Path | None = None) -> TuneRecord:
    """Tune, validate (unless `validate` is False), write the study's files and the record (result.json); the
    record (its report and figures are the caller's: simlab/reporting). `warn` receives warnings (the capacity
    of the traffic, the batch-absent floor). InputError when no policy can meet the SLO and `force` is not set
    (raised after the record is written, so the study and report are kept: the caller renders first, see
    `Refused`). `family` is the policy whose options are searched (simlab/tuning/space.py `family_space`): the
    adaptive cap (what `simlab tune` searches) or a gateway gate (inside `simlab decide`). `search_runs`: where the
    reference and batch-absent runs on the search units go (default OUT/search); families tuned on the same
    units share one folder, so those runs are made once."""
    from simlab.tuning.study import join as join_study, optimize

    setup = _prepare(scenario, base, out, trials=trials, workers=workers, storage=storage, study=study,
                     objective=objective, mode=mode, progress=progress, validate=validate, warn=warn, family=family,
                     search_runs=search_runs)
    bar = _progress_bar(setup.n_trials, [setup.ctx]) if progress else None
    try:
        result = (join_study(setup.ctx, setup.n_trials, progress=bar) if join else
                  optimize(setup.ctx, setup.n_trials, workers=workers, progress=bar))
    finally:
        if bar is not None:
            bar.close()
    return _finish(setup, result, workers, progress, validate, force)


@pooled
def run_tune_families(scenario: Scenario, base: SchedulerOptions, outs: dict[str, Path], *, trials: int,
                      workers: int = 1, progress: bool = True, warn: Callable[[str], None] | None = None,
                      search_runs: Path | None = None) -> dict[str, TuneRecord]:
    """`run_tune(validate=False)` for several families (family -> its folder) on the same search units, their
    studies' batches sharing the pool (simlab/tuning/study.py `optimize_all`): each record is what `run_tune` alone
    would write, in less wall time. Inside `simlab decide`."""
    from simlab.tuning.study import optimize_all

    setups, baseline = {}, None
    for family, out in outs.items():  # the first family measures the search units' baseline; the others read it
        setups[family] = _prepare(scenario, base, out, trials=trials, workers=workers, progress=progress,
                                  validate=False, warn=warn, family=family, search_runs=search_runs, baseline=baseline)
        baseline = setups[family].baseline
    bar = _progress_bar(trials, [s.ctx for s in setups.values()]) if progress else None
    try:
        studies = optimize_all([s.ctx for s in setups.values()], trials, workers, bar)
    finally:
        if bar is not None:
            bar.close()
    return {family: _finish(setup, study, workers, progress, False, False)
            for (family, setup), study in zip(setups.items(), studies)}


def _prepare(scenario: Scenario, base: SchedulerOptions, out: Path, *, trials: int | None, workers: int,
             storage: str | None = None, study: str | None = None, objective: str | None = None,
             mode: str | None = None, progress: bool, validate: bool, warn: Callable[[str], None] | None,
             family: str, search_runs: Path | None, baseline: _Baseline | None = None) -> _Setup:
    """The search's context, with the search units' baseline (`_baseline`) measured here unless given (families
    on the same search units share one)."""
    from simlab.tuning.space import family_space
    from simlab.tuning.study import TuneContext, refuse_changed_study, remember
    from simlab.world.conditions import split

    quiet_optuna()
    say = warn or (lambda _message: None)
    changes = {k: v for k, v in (("objective", objective), ("mode", mode)) if v is not None}
    if changes:
        scenario = scenario.model_copy(update={"tune": scenario.tune.model_copy(update=changes)})
    tune = scenario.tune
    n_trials = tune.trials if trials is None else trials
    space = family_space(family, scenario, base)
    seeds = list(range(tune.first_seed, tune.first_seed + tune.seeds))
    search_conds, held_conds = split(scenario)
    check_units(scenario)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = TuneContext(scenario, base, space, storage or f"sqlite:///{(out / 'study.db').resolve()}",
                      study or scenario.name, seeds,
                      search_worlds=[(c.name, c.apply(scenario)) for c in search_conds],
                      holdout_worlds=[(c.name, c.apply(scenario)) for c in held_conds])
    ctx.identity = {"simlab_objective": f"{tune.mode}:{tune.objective}", "simlab_scenario": scenario.name,
                    **_setup_identity(scenario, base, space, seeds)}
    if len(ctx.search_worlds) > 1 or ctx.search_worlds[0][0] != "base":
        ctx.identity["simlab_search_conditions"] = ",".join(n for n, _ in ctx.search_worlds)
    try:
        refuse_changed_study(ctx)  # before any work: a study made from other inputs is never resumed
    except InputError:
        if validate:
            raise
        # inside decide the study is decide's own cache: one made from other inputs is replaced, not resumed
        import optuna

        from simlab.tuning.study import open_storage

        optuna.delete_study(study_name=ctx.study_name, storage=open_storage(ctx.storage_url))
        say(f"{out}: the tuning study was made with other inputs (scenario, options or simlab's code); started anew")

    _say_outside(ctx, say)
    if baseline is None:
        baseline = _baseline(ctx, Path(search_runs) if search_runs is not None else out / "search", workers, progress,
                             say)
    units = ctx.units()  # condition by condition, as every trial's per-unit values
    reference = ctx.base.with_changes(policy=tune.reference)
    ctx.reference_per_seed = [float(baseline.ran[("reference", c, s)]["batch_throughput_per_min"]) for c, s in units]
    remember(ctx, reference, [baseline.ran[("reference", c, s)] for c, s in units])  # a trial that runs as it
    ctx.reference_throughput = sum(ctx.reference_per_seed) / len(ctx.reference_per_seed)
    return _Setup(ctx, n_trials, out, baseline)


def _say_outside(ctx: TuneContext, say: Callable[[str], None]) -> None:
    """A warning for each production default that lies outside its searched range ([tune.bounds] or the default
    range): the defaults' trial measures it as set, and no other trial comes near it."""
    from simlab.tuning.study import baselines

    where = ctx.scenario.path or f"scenario {ctx.scenario.name!r}"  # a Scenario built in Python has no file
    said = set()
    for origin, params in baselines(ctx):
        for key, value, lo, hi in ctx.space.outside(params):
            if key not in said:
                said.add(key)
                say(f"{where}: the scenario's {key} = {value:g} lies outside the searched range "
                    f"[{lo:g}, {hi:g}] (tune.bounds.{key} or its default); the {origin} trial measures it as set, "
                    "and the search proposes values inside the range only")


def _baseline(ctx: TuneContext, folder: Path, workers: int, progress: bool, say: Callable[[str], None]) -> _Baseline:
    """The reference arm's runs on the search units (its batch throughput: the constraint's yardstick) and, with
    both kinds of work, the batch-absent ones (their interactive P95: the floor no options go below), made in
    `folder` or read from it; a warning when the floor or the capacity leaves the SLO out of reach."""
    from simlab.experiments import capacity
    from simlab.experiments.metrics import few_requests_warning
    from simlab.experiments.plan import NO_BATCH, ArmSpec, Plan
    from simlab.world.conditions import split

    scenario, base = ctx.scenario, ctx.base
    plan = Plan(scenario, split(scenario)[0], folder, workers, progress)
    plan.add_seeds(ctx.seeds)
    reference = ArmSpec("reference", base.with_changes(policy=scenario.tune.reference), "baseline")
    both = {w.kind for w in scenario.workload} == {"interactive", "batch"}
    bound = ArmSpec(NO_BATCH, base.with_changes(policy="unscheduled"), "bound", "no-batch")
    ran = plan.run([reference] + ([bound] if both else [])).metrics
    floor = []
    if both:
        p95 = (float(ran[(NO_BATCH, c, s)]["interactive_p95_ms"]) for c, s in ctx.units())
        floor = [v for v in p95 if math.isfinite(v)]
    above = bool(floor) and sum(floor) / len(floor) > scenario.slo_p95_ms
    if (few := few_requests_warning((ran[("reference", c, s)] for c, s in ctx.units()), "search run")) is not None:
        say(few)
    if above:
        say(f"capacity: with batch work absent, interactive P95 is already {sum(floor) / len(floor):,.0f} ms (mean "
            f"over {len(floor)} search runs), above the SLO ({scenario.slo_p95_ms:,.0f} ms): no scheduler can meet "
            "this SLO on this traffic.")
    return _Baseline(ran, capacity.check(scenario).slo_unreachable, above)


def _finish(setup: _Setup, result, workers: int, progress: bool, validate: bool, force: bool) -> TuneRecord:
    """After the search: its picks (decide's candidates), or the validated pick exported; the files and record."""
    from simlab.tuning.report import build_record, write_best, write_candidate, write_record, write_tables
    from simlab.tuning.validation import (checkpoints, choose, found_at, picks_after, search_picks,
                                         validate as run_validation)

    ctx, n_trials, out = setup.ctx, setup.n_trials, setup.out
    scenario = ctx.scenario
    if not validate:
        after = picks_after(ctx, result, n_trials)
        picks = search_picks(ctx, result, n_trials, after)
        # what a run with half the trials races from this search: the same trials, read at that budget
        half = search_picks(ctx, result, n_trials // 2) if checkpoints(n_trials) else {}
        write_candidate(out, picks)
        write_tables(ctx, result, out, None, None)
        return write_record(build_record(ctx, result, [], None, None, candidates=picks,
                                         found=found_at(ctx, result, n_trials), picks_after=after,
                                         half_picks=half), out)
    candidates, note = choose(ctx, result)
    rows, summary = run_validation(ctx, candidates, out, workers, progress)
    refuse = (setup.baseline.unreachable or setup.baseline.above) and not force
    pick = None if refuse else write_best(out, summary, ctx.multi)
    write_tables(ctx, result, out, rows, summary)
    record = write_record(build_record(ctx, result, summary, note, pick), out)
    if refuse:
        raise Refused(record,
            scenario.path, "slo_p95_ms",
            f"no policy can meet the SLO ({scenario.slo_p95_ms:,.0f} ms) on this traffic (see the capacity warning "
            f"above), so no options were exported. The study, trials and report are kept in {out}; fix the "
            "capacity or the SLO, or rerun with --force to export the best options anyway.",
        )
    return record


def _setup_identity(scenario, base, space, seeds) -> dict[str, str]:
    """What makes two studies comparable: everything but the number of trials, including the bytes of every
    file the scenario reads and simlab's code (a resumed study must not mix trials of different inputs)."""
    from simlab import fingerprint

    setup = {"base": base.to_json_dict(), "space": space.bounds, "seeds": seeds}
    if space.family != "adaptive":
        setup.update(family=space.family, choices={k: list(v) for k, v in space.choices.items()})
    return fingerprint.identity(scenario, setup, drop_tune=("trials",))


class _progress_bar:
    """tqdm over the finished trials of one study or several (one bar), with the best feasible value so far when
    there is one study."""

    def __init__(self, per_study: int, ctxs: list):
        from tqdm import tqdm

        self.ctx = ctxs[0] if len(ctxs) == 1 else None
        self.done: dict[int, int] = {}  # id(study) -> its finished trials
        self.per_study = per_study
        self.bar = tqdm(total=per_study * len(ctxs), desc="trials", unit="trial")

    def __call__(self, study) -> None:
        from simlab.tuning.validation import completed, feasible

        done = completed(study)
        self.done[id(study)] = min(len(done), self.per_study)
        self.bar.update(max(0, sum(self.done.values()) - self.bar.n))
        ok = [t.values[0] for t in done if feasible(t)] if self.ctx is not None else []
        if ok:
            self.bar.set_postfix_str(f"best {self.ctx.tune.objective} {min(ok):,.0f} ms")

    def close(self):
        self.bar.close()
