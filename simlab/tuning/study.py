"""An Optuna study driven so that it is reproducible and resumable.

Trials are proposed in fixed-size batches: the sampler for trial slot k is seeded from (sampler_seed, k) and
sees exactly the trials of earlier batches (and the running ones of its own), so the sequence of proposals
does not depend on `--workers`, on timing, or on whether the study was interrupted. Workers run a batch's
units (one job per trial x condition x seed, so no worker idles while another finishes a trial). The
controller proposes and records on a copy of the study in memory and writes each trial to the storage in one
transaction as soon as it, and every trial proposed before it, has its results (against SQLite, a dozen commits
per trial and the sampler's reads of every trial per parameter would be a quarter of a search's CPU). A
rerun after Ctrl-C or kill -9 proposes the slots not written again, to the same parameters, and goes on.
"""

from __future__ import annotations

import atexit
import copy
import math
import os
import warnings
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from simlab.errors import InputError
from simlab.experiments.runner import Job, cancel_on_failure, execute, execute_cell, one_pool, shared_pool
from simlab.experiments.twins import as_twin, run_key
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario
from simlab.tuning import STARTUP_TRIALS
from simlab.tuning.space import Space, options_for, params_of

OBJECTIVE_METRIC = {"p95": "interactive_p95_ms", "p99": "interactive_p99_ms"}
MARKER = "simlab_objective"  # the identity key whose presence says a study's identity is fully written


@dataclass
class TuneContext:
    scenario: Scenario
    base: SchedulerOptions  # the configuration in production today (the article's defaults unless told)
    space: Space
    storage_url: str
    study_name: str
    seeds: list[int]
    reference_throughput: float = math.nan
    reference_per_seed: list[float] = field(default_factory=list)  # per search unit, in `units()` order
    identity: dict = field(default_factory=dict)
    # traffic conditions (simlab/world/conditions.py), each the scenario transformed: a trial runs on every
    # search condition x search seed; validation on every held-out condition x held-out seed (never a searched one
    # when there are two conditions or more). Empty: the scenario itself.
    search_worlds: list = field(default_factory=list)  # [(condition name, Scenario)]
    holdout_worlds: list = field(default_factory=list)
    # runs made on the search units, by `run_keys` key: trials that are one simulation share it (in memory: a
    # resumed study makes them again, to the same numbers)
    shared: dict = field(default_factory=dict)

    def worlds(self, held: bool = False) -> list:
        w = self.holdout_worlds if held else self.search_worlds
        return w or [("base", self.scenario)]

    def units(self, held: bool = False) -> list[tuple[str, int]]:
        """(condition, seed) in the order every per-unit list follows."""
        seeds = holdout_seeds_of(self) if held else self.seeds
        return [(name, s) for name, _ in self.worlds(held) for s in seeds]

    @property
    def tune(self):
        return self.scenario.tune

    @property
    def multi(self) -> bool:
        return self.tune.mode == "multi"


def holdout_seeds_of(ctx) -> list[int]:
    return list(range(ctx.tune.holdout_first_seed, ctx.tune.holdout_first_seed + ctx.tune.holdout_seeds))


def constraint_of(trial) -> list[float]:
    """<= 0 when the trial keeps batch throughput at the required fraction of the reference arm."""
    return [trial.user_attrs.get("constraint", math.inf)]


def make_sampler(sampler_seed: int, slot: int) -> optuna.samplers.BaseSampler:
    # Optuna 5 deprecates `constraints_func` for Trial.set_constraint, which needs the live Trial; worker processes
    # store results through the storage, so the sampler-side function stays, and its warning is not the caller's.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`constraints_func` has been deprecated", category=FutureWarning)
        return optuna.samplers.TPESampler(
            seed=(sampler_seed * 1_000_003 + slot) % 2**32,
            constraints_func=constraint_of,
            n_startup_trials=STARTUP_TRIALS,
        )


class EarlierBatches(optuna.samplers.BaseSampler):
    """`inner` proposing slot `slot` from the study as a study run without a stop saw it then: the batches
    before the slot's own finished, the slots of its own batch before it running (TPE's constant liar counts
    them), nothing after. A study stopped inside a batch (--trials 10 in batches of 4) and grown proposes slots
    10 and 11 as a 20-trial study did, with 8 and 9 running, not finished; so trial k is the same at every
    budget."""

    def __init__(self, inner: optuna.samplers.BaseSampler, slot: int, batch_size: int):
        self.inner, self.slot, self.first = inner, slot, slot - slot % batch_size

    def _view(self, study):
        return _StudyAsThen(study, self.first, self.slot)

    def infer_relative_search_space(self, study, trial):
        return self.inner.infer_relative_search_space(self._view(study), trial)

    def sample_relative(self, study, trial, search_space):
        return self.inner.sample_relative(self._view(study), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.inner.sample_independent(self._view(study), trial, param_name, param_distribution)

    def before_trial(self, study, trial):
        self.inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self):
        self.inner.reseed_rng()


class _StudyAsThen:
    """A study's trials as they stood when slot `slot` was proposed in a study run without a stop: slots
    before `first` as stored, slots `first`..`slot - 1` running, later slots absent; trials without a slot (the
    one being proposed, a joined peer's) as stored."""

    def __init__(self, study: optuna.Study, first: int, slot: int):
        self._study, self._first, self._slot = study, first, slot

    def __getattr__(self, name):
        return getattr(self._study, name)

    def _then(self, trials, states):
        out = []
        for t in trials:
            slot = t.user_attrs.get("slot")
            if slot is not None and slot >= self._slot:
                continue
            if slot is not None and slot >= self._first and t.state.is_finished():
                t = copy.copy(t)
                t.state, t.values, t.datetime_complete = TrialState.RUNNING, None, None
            if states is None or t.state in states:
                out.append(t)
        return out

    def _get_trials(self, deepcopy=True, states=None, use_cache=False):
        trials = self._then(self._study._get_trials(deepcopy=False, states=None, use_cache=use_cache), states)
        return copy.deepcopy(trials) if deepcopy else trials

    def get_trials(self, deepcopy=True, states=None):
        return self._get_trials(deepcopy, states)

    @property
    def trials(self):
        return self.get_trials()


_STORAGES: dict[str, optuna.storages.BaseStorage] = {}


def _forget_storages_in_child() -> None:
    # A forked worker must not use (or close) the parent's database connections: PostgreSQL would see two
    # clients on one socket. Drop them without closing and let the child connect on its own.
    for storage in _STORAGES.values():
        engine = getattr(storage, "engine", None)
        if engine is not None:
            engine.dispose(close=False)
    _STORAGES.clear()


os.register_at_fork(after_in_child=_forget_storages_in_child)


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna RDB storage (SQLite file, PostgreSQL, ...); InputError when it cannot be opened."""
    if url in _STORAGES:
        return _STORAGES[url]
    kwargs = {}
    driver_url = url
    sqlite = url.startswith("sqlite:///")
    if url.startswith(("postgresql://", "postgres://")):
        # SQLAlchemy 2.1 reads plain postgresql:// as psycopg 3; simlab ships psycopg2
        driver_url = "postgresql+psycopg2://" + url.split("://", 1)[1]
    if sqlite:
        try:
            Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(None, "--storage", f"cannot make the folder of {_redact(url)} ({exc.strerror})") from None
        kwargs = {"connect_args": {"timeout": 120}}
    elif url.startswith("postgresql"):
        kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    try:
        storage = optuna.storages.RDBStorage(driver_url, engine_kwargs=kwargs)
    except ImportError as exc:
        raise InputError(None, "--storage", f"no database driver for {_redact(url)} ({exc})") from None
    except Exception as exc:  # sqlalchemy raises many kinds for a bad or unreachable URL
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(None, "--storage", f"cannot open storage {_redact(url)}: {reason}") from None
    if sqlite:
        _fast_commits(storage)
    _STORAGES[url] = storage
    return storage


def _fast_commits(storage: optuna.storages.RDBStorage) -> None:
    """SQLite in WAL mode with synchronous=NORMAL: a commit appends to the log and does not wait for the disk.
    A joined worker commits a dozen times per trial (its parameters, results and state; the controller once, see
    `Search.write`), and with the default rollback journal each commit is an fsync (7.6 ms against 1.6 ms here).
    A killed process loses nothing; a power cut may lose the last commits, never the file's consistency, and a
    trial whose result is lost is run again on resume. Several processes on one machine share a WAL file; on a
    network filesystem, where SQLite's locks do not hold anyway, use PostgreSQL."""
    import sqlalchemy

    def pragmas(connection, _record):
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    sqlalchemy.event.listen(storage.engine, "connect", pragmas)
    storage.engine.dispose()  # the connection that made the tables predates the listener
    # At exit, close the connections: the last one to close folds the log into study.db and removes it, so a
    # finished command leaves one self-contained file (a killed one leaves the log, which the next open reads).
    atexit.register(storage.engine.dispose)


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def load_or_create(ctx: TuneContext) -> optuna.Study:
    storage = open_storage(ctx.storage_url)
    directions = ["minimize", "maximize"] if ctx.multi else ["minimize"]
    try:
        study = optuna.load_study(study_name=ctx.study_name, storage=storage, sampler=make_sampler(ctx.tune.sampler_seed, 0))
    except KeyError:
        # load_if_exists: joined workers may race to create the same study
        study = optuna.create_study(study_name=ctx.study_name, storage=storage, directions=directions,
                                    sampler=make_sampler(ctx.tune.sampler_seed, 0), load_if_exists=True)
    fresh = MARKER not in study.user_attrs and not study.get_trials(deepcopy=False)
    if fresh and [d.name.lower() for d in study.directions] == directions:
        # A new study (possibly just made by a peer). Each attribute is its own write, so the marker goes last:
        # a peer that sees it sees the whole identity, never half of it.
        study.set_user_attr("reference_throughput_per_min", ctx.reference_throughput)
        for key, value in ctx.identity.items():
            if key != MARKER:
                study.set_user_attr(key, value)
        study.set_user_attr(MARKER, ctx.identity[MARKER])
        return study
    _refuse_changed(ctx, study, directions)
    return study


def _refuse_changed(ctx: TuneContext, study: optuna.Study, directions: list[str]) -> None:
    """InputError naming what changed when an existing study was made from other inputs."""
    existing = {k: study.user_attrs.get(k) for k in ctx.identity}
    if [d.name.lower() for d in study.directions] != directions or existing != ctx.identity:
        from simlab.fingerprint import describe_changes

        what = describe_changes(existing, ctx.identity) or ["objective direction"]
        raise InputError(
            None,
            "--study",
            f"study '{ctx.study_name}' in {_redact(ctx.storage_url)} was made with different inputs, so it cannot "
            f"be resumed: {'; '.join(what)}. Use another --study name, --out or --storage, or restore the inputs. "
            "Nothing was changed.",
        )


def refuse_changed_study(ctx: TuneContext) -> None:
    """Before any work: refuse to resume a study whose inputs changed (a missing study is fine)."""
    url = ctx.storage_url
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        return
    try:
        study = optuna.load_study(study_name=ctx.study_name, storage=open_storage(url))
    except KeyError:
        return
    if MARKER in study.user_attrs or study.get_trials(deepcopy=False):
        _refuse_changed(ctx, study, ["minimize", "maximize"] if ctx.multi else ["minimize"])


def trials_by_slot(study: optuna.Study) -> dict[int, optuna.trial.FrozenTrial]:
    """The trial holding each slot; a slot re-proposed after a failure keeps its latest trial."""
    out = {}
    for t in study.get_trials(deepcopy=False):
        slot = t.user_attrs.get("slot")
        if slot is not None and (slot not in out or t.number > out[slot].number):
            out[slot] = t
    return out


def baselines(ctx: TuneContext) -> list[tuple[str, dict]]:
    """The production defaults and a static-cap equivalent go first, so every improvement is measured against them."""
    defaults = params_of(ctx.base.with_changes(policy=ctx.space.family), ctx.space)
    out = [("defaults", defaults)]
    if ctx.space.family != "adaptive":  # a gate's static equivalent is on decide's static frontier already
        return out
    static_like = dict(defaults, batchMinConcurrency=defaults.get("batchMaxConcurrency", 1))
    if static_like != defaults:
        out.append(("static-equivalent", static_like))
    return out


def propose(study: optuna.Study, ctx: TuneContext, slot: int) -> int:
    """Create the trial for `slot`: enqueued baseline parameters, or the sampler seeded for this slot."""
    first = baselines(ctx)
    if slot < len(first) and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        origin, params = first[slot]
        study.enqueue_trial(params, user_attrs={"origin": origin})
    study.sampler = EarlierBatches(make_sampler(ctx.tune.sampler_seed, slot), slot, ctx.tune.batch_size)
    live = study.ask()
    live.set_user_attr("slot", slot)
    ctx.space.suggest(live)
    return live.number


def working_copy(durable: optuna.Study, ctx: TuneContext) -> optuna.Study:
    """`durable`'s trials in an in-memory study, in their order, for the controller to propose and record on
    (`Search.write` copies its new trials back). The controller never leaves a trial unfinished in the storage;
    running trials there are joined peers', copied as they stood: the copy does not follow peers' later trials
    (peers alongside a controller were never reproducible; `join` itself works on the storage)."""
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), directions=durable.directions,
                                sampler=make_sampler(ctx.tune.sampler_seed, 0))
    for t in durable.get_trials(deepcopy=False):
        if t.state != TrialState.WAITING:
            study._storage.create_new_trial(study._study_id, template_trial=t)  # as `Search.write`
    return study


# --- evaluation -------------------------------------------------------------------------------------
def trial_options(ctx: TuneContext, trial) -> SchedulerOptions:
    """The options a trial runs: exactly what runs in production today for the enqueued defaults (a gate: as
    `simlab ab --policies <gate>` runs it), else the trial's parameters."""
    if trial.user_attrs.get("origin") == "defaults":
        return ctx.base.with_changes(policy=ctx.space.family)
    return options_for(ctx.base, trial.params, ctx.scenario, ctx.space)


def unit_jobs(ctx: TuneContext, number: int, options: SchedulerOptions) -> list[tuple[Scenario, Job, None]]:
    """A trial's runs: every search condition x search seed (`TuneContext.units` order)."""
    return [(world, Job(f"trial-{number}", options, s), None) for _, world in ctx.worlds() for s in ctx.seeds]


def remember(ctx: TuneContext, options: SchedulerOptions, per_unit: list[dict]) -> None:
    """Runs of `options` made on the search units elsewhere (the reference arm): a trial that is the same simulation
    takes them (`run_keys`)."""
    for key, metrics in zip(run_keys(ctx, options), per_unit):
        ctx.shared.setdefault(key, metrics)


def run_keys(ctx: TuneContext, options: SchedulerOptions) -> list[tuple]:
    """Per search unit (`TuneContext.units` order), what decides a run of `options` there: trials (and the
    reference) with equal keys are one simulation (simlab/experiments/twins.py)."""
    return [(run_key(options, world), name, s) for name, world in ctx.worlds() for s in ctx.seeds]


def record(ctx: TuneContext, study: optuna.Study, number: int, options: SchedulerOptions, per_seed: list[dict]) -> None:
    """Store a trial's per-unit results and tell the study its value (FAIL when a value is not finite)."""
    storage = study._storage
    trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    metric = OBJECTIVE_METRIC[ctx.tune.objective]
    objective = [m[metric] for m in per_seed]
    throughput = [m["batch_throughput_per_min"] for m in per_seed]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731  (plain mean: reproducible to the bit)
    thr = mean(throughput)
    storage.set_trial_user_attr(trial_id, "options", options.to_json_dict())
    storage.set_trial_user_attr(trial_id, "objective_per_seed", objective)
    storage.set_trial_user_attr(trial_id, "throughput_per_seed", throughput)
    storage.set_trial_user_attr(trial_id, "p95_mean", mean([m["interactive_p95_ms"] for m in per_seed]))
    storage.set_trial_user_attr(trial_id, "p99_mean", mean([m["interactive_p99_ms"] for m in per_seed]))
    storage.set_trial_user_attr(trial_id, "throughput_mean", thr)
    storage.set_trial_user_attr(trial_id, "stranded", sum(m["stranded"] for m in per_seed))
    constraint = ctx.tune.throughput_fraction * ctx.reference_throughput - thr if math.isfinite(thr) else math.inf
    storage.set_trial_user_attr(trial_id, "constraint", constraint)
    value = mean(objective)
    if not all(math.isfinite(v) for v in (value, thr)):
        study.tell(number, state=TrialState.FAIL)  # e.g. no interactive request completed
        return
    study.tell(number, [value, thr] if ctx.multi else value)


class Search:
    """One study's batched loop as a state machine (`next_batch`, `runs`, `ran`), so that one pool can run the
    batches of several studies at once (`optimize_all`): while one study waits for its last runs or proposes its
    next batch, the workers run another's. A study's proposals depend only on its own earlier batches, so what
    each study holds is the same however its batches interleave with others'. The controller is the only writer
    of the storage."""

    def __init__(self, ctx: TuneContext, n_trials: int, progress=None, study: optuna.Study | None = None):
        """`study`: one already open (`join`'s, whose peers' trials it must see as they land), worked on as it
        is; else the context's, loaded or made, worked on in memory (`working_copy`) and written back."""
        self.ctx, self.n_trials, self.progress = ctx, n_trials, progress
        self.durable = study if study is not None else load_or_create(ctx)
        self.study = study if study is not None else working_copy(self.durable, ctx)
        self._written = len(self.study.get_trials(deepcopy=False))  # the working copy's trials up to here are stored
        self._start = 0  # the first slot of the next batch
        self._pending: dict[int, tuple] = {}  # trial -> (options, per-unit results, [units left])
        self._waiting: dict[tuple, list[tuple[int, int]]] = {}  # a run being made -> the (trial, unit) waiting

    @property
    def busy(self) -> bool:
        """Runs of the current batch are still being made."""
        return bool(self._waiting)

    def next_batch(self) -> list[int] | None:
        """The next batch's trials not stored yet, proposed now ([] when a longer or interrupted run stored them
        all); None when every slot is done."""
        if self._start >= self.n_trials:
            return None
        study, slots = self.study, trials_by_slot(self.study)
        todo = []
        for k in range(self._start, min(self._start + self.ctx.tune.batch_size, self.n_trials)):
            if k not in slots:  # a slot stored earlier (this budget's or a smaller one's) is done, failed or not
                todo.append(propose(study, self.ctx, k))
        self._start += self.ctx.tune.batch_size
        return todo

    def runs(self, numbers: list[int]) -> list[tuple[tuple, tuple]]:
        """The (key, job) runs the batch `numbers` needs: one per unit, less those another trial of the study (or
        the reference) has made or is making (`run_keys`); units already made are stored at once."""
        ctx, storage = self.ctx, self.study._storage
        out = []
        for number in numbers:
            trial = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(self.study._study_id, number))
            if trial.state.is_finished():
                continue
            options = trial_options(ctx, trial)
            cells = unit_jobs(ctx, number, options)
            self._pending[number] = (options, [None] * len(cells), [len(cells)])
            for k, (cell, key) in enumerate(zip(cells, run_keys(ctx, options))):
                if key in ctx.shared:
                    self._unit_done(number, k, ctx.shared[key])
                elif key in self._waiting:
                    self._waiting[key].append((number, k))
                else:
                    self._waiting[key] = [(number, k)]
                    out.append((key, cell))
        return out

    def ran(self, key: tuple, metrics: dict) -> None:
        """The run `key` is made: every unit waiting for it has its result."""
        self.ctx.shared[key] = metrics
        for number, k in self._waiting.pop(key):
            self._unit_done(number, k, metrics)

    def _unit_done(self, number: int, k: int, metrics: dict) -> None:
        """Unit k of trial `number` has its result; the trial is recorded once its last unit has one, and stored
        once the trials proposed before it are (`write`)."""
        options, results, left = self._pending[number]
        results[k] = as_twin(metrics, f"trial-{number}")
        left[0] -= 1
        if left[0] == 0:
            del self._pending[number]
            record(self.ctx, self.study, number, options, results)
            self.write()
            if self.progress:
                self.progress(self.study)

    def write(self) -> None:
        """Store the working copy's finished trials, in the order they were proposed, up to the first one still
        running: one transaction each, and the stored study's trial numbers follow the slots at any --workers."""
        if self.study is self.durable:
            return
        trials, durable = self.study.get_trials(deepcopy=False), self.durable
        while self._written < len(trials) and trials[self._written].state.is_finished():
            # the storage's own call, not Study.add_trial: that refuses the defaults trial's enqueued values when
            # they lie outside the searched range, which the study itself stored as they were
            durable._storage.create_new_trial(durable._study_id, template_trial=trials[self._written])
            self._written += 1

    def run_here(self, numbers: list[int] | None = None) -> None:
        """These trials (default: every batch left) in this process, one run at a time."""
        for batch in ([numbers] if numbers is not None else iter(self.next_batch, None)):
            for key, cell in self.runs(batch):
                self.ran(key, execute(*cell))


# --- the controller --------------------------------------------------------------------------------
def optimize(ctx: TuneContext, n_trials: int, workers: int = 1, progress=None) -> optuna.Study:
    """Run (or continue) the study up to `n_trials` slots."""
    return optimize_all([ctx], n_trials, workers, progress)[0]


def optimize_all(ctxs: list[TuneContext], n_trials: int, workers: int = 1, progress=None) -> list[optuna.Study]:
    """Run (or continue) several studies up to `n_trials` slots each, their batches sharing one pool: a study
    proposes its next batch as soon as its last one is stored, while the workers run the others' runs (so
    neither the proposals nor a batch's last runs leave a worker idle). Each study ends as `optimize` alone would
    leave it."""
    with one_pool(workers):  # the command's pool (run_tune, run_decide), or one for these studies
        pool = shared_pool(workers)  # None for one process
        searches = [Search(ctx, n_trials, progress) for ctx in ctxs]
        if pool is None:
            for search in searches:
                search.run_here()
            return [s.durable for s in searches]
        futures: dict = {}

        def feed(search: Search) -> None:  # its next batches, until one has runs to wait for (or none is left)
            while not search.busy and (numbers := search.next_batch()) is not None:
                for key, cell in search.runs(numbers):
                    futures[pool.submit(execute_cell, cell)] = (search, key)

        with cancel_on_failure(futures):
            for search in searches:
                feed(search)
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in done:
                    search, key = futures.pop(future)
                    search.ran(key, future.result())
                    feed(search)
    return [s.durable for s in searches]


def join(ctx: TuneContext, n_trials: int, progress=None) -> optuna.Study:
    """Many machines on one study (e.g. PostgreSQL): each process proposes and evaluates trials until the study
    holds `n_trials`. Scales out freely, but proposals depend on timing, so it is not reproducible."""
    study = load_or_create(ctx)
    study.sampler = make_sampler(ctx.tune.sampler_seed, os.getpid())
    search = Search(ctx, n_trials, progress, study)
    while len(study.get_trials(deepcopy=False)) < n_trials:
        trial = study.ask()
        ctx.space.suggest(trial)
        trial.set_user_attr("origin", "joined")
        search.run_here([trial.number])
    return study
