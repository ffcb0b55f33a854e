"""Run many (policy, seed) simulations in parallel processes, each saved on its own so a rerun resumes.

Every job writes its files atomically and `run.json` last; a rerun skips jobs whose `run.json` carries the
same key: the scenario's settings, the bytes of every file it points at, the options, seed, variant,
simlab's code and the versions of the libraries that compute a run (simlab.fingerprint), and whose folder
still holds the files this job asks for (a run kept with `--tasks none` has no per-task file for a later
`--tasks csv`). Results are gathered in job order, so the output does not depend on the number of workers
or on which job finished first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simlab import fingerprint
from simlab.store import atomic_open, atomic_write_text
from simlab.experiments.metrics import summarize
from simlab.experiments.runfiles import TASK_FILES
from simlab.store import csv_cell
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario
from simlab.world.engine import SERIES_COLUMNS, Engine, SimResult


# Bound runs: the same scenario with one class removed, every task let through at once.
VARIANTS = {
    "": None,
    "no-batch": "interactive",  # interactive P95 no scheduler can beat without preemption
    "batch-alone": "batch",  # batch makespan with the whole capacity
}


@dataclass(frozen=True)
class Job:
    label: str  # what the tables call it: a policy name or a bound's name
    options: SchedulerOptions
    seed: int
    variant: str = ""
    keep_tasks: bool = False
    tasks_format: str = "auto"  # runfiles.TASK_FORMATS; "none" keeps only the summary and the time series

    def dirname(self) -> str:
        return f"{self.label}/seed-{self.seed}"


def scenario_variant(scenario: Scenario, variant: str) -> Scenario:
    keep = VARIANTS[variant]
    if keep is None:
        return scenario
    return scenario.model_copy(update={"workload": [w for w in scenario.workload if w.kind == keep]})


def job_key(scenario: Scenario, job: Job) -> str:
    return fingerprint.digest(
        {
            "scenario": scenario.model_dump(mode="json", by_alias=True),
            "inputs": fingerprint.input_hashes(scenario),
            "options": job.options.to_json_dict(),
            "seed": job.seed,
            "variant": job.variant,
            "code": fingerprint.code_fingerprint(),
            "libraries": fingerprint.library_versions(),
        }
    )


def _outputs(job: Job, files: list[str]) -> dict:
    return {"tasks_format": job.tasks_format if job.keep_tasks else None, "files": files}


def _has_outputs(saved: dict, job: Job, run_dir: Path) -> bool:
    """Whether a finished run's folder holds what `job` asks for: nothing beyond the metrics, or its time series
    and (unless --tasks none) the per-task file in the format asked for, still on disk."""
    if not job.keep_tasks:
        return True
    outputs = saved.get("outputs") or {}
    files = outputs.get("files") or []
    if "series.csv" not in files or not all((run_dir / name).is_file() for name in files):
        return False
    return job.tasks_format == "none" or outputs.get("tasks_format") == job.tasks_format


def write_tasks(result: SimResult, run_dir: Path, fmt: str = "auto") -> Path | None:
    """The per-task file, once, from the run's columns (see simlab.experiments.runfiles)."""
    from simlab.experiments.runfiles import write_tasks as write

    return write(result, run_dir, fmt)


def write_series(result: SimResult, path: Path) -> None:
    cols = [result.series[c] for c in SERIES_COLUMNS]
    with atomic_open(path, "w", encoding="utf-8", newline="") as f:
        f.write(",".join(SERIES_COLUMNS) + "\n")
        for row in zip(*cols):
            f.write(",".join(csv_cell(float(v), None) for v in row) + "\n")  # raw: exact


def execute(scenario: Scenario, job: Job, out: Path | None) -> dict:
    """Run one job (or load it when already done) and return its metrics."""
    key = job_key(scenario, job)
    run_dir = out / "runs" / job.dirname() if out is not None else None
    if run_dir is not None:
        done = run_dir / "run.json"
        if done.is_file():
            try:
                saved = json.loads(done.read_text())
                if saved.get("key") == key and _has_outputs(saved, job, run_dir):
                    return saved["metrics"]
            except (ValueError, KeyError, AttributeError):  # JSON or UTF-8 damage, or not a record
                pass  # a damaged marker: run again
    world = scenario_variant(scenario, job.variant)
    # No per-task file: the run keeps only the columns its summary reads, and the summary frees them as it goes.
    summary_only = not job.keep_tasks or job.tasks_format == "none"
    # without files, nothing reads the time series: no samples taken
    result = Engine(world, job.options, job.seed, summary=summary_only, series=job.keep_tasks).run()
    result.policy = job.label
    metrics = summarize(result, scenario.slo_p95_ms, scenario.criteria.slo_bin_ms, consume=summary_only)
    metrics["policy"] = job.label
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        files = []
        if job.keep_tasks:
            written = None if summary_only else write_tasks(result, run_dir, job.tasks_format)
            if written is None:  # --tasks none: an older run's per-task file must not pass for this run's
                for stale in TASK_FILES:
                    (run_dir / stale).unlink(missing_ok=True)
            else:
                files.append(written.name)
            write_series(result, run_dir / "series.csv")
            files.append("series.csv")
        record = {"key": key, "label": job.label, "seed": job.seed, "variant": job.variant,
                  "options": job.options.to_json_dict(), "backend": result.backend_stats, "metrics": metrics,
                  "outputs": _outputs(job, files)}
        # a cache marker, not fsynced: a damaged one (a power cut) fails to parse above and the run is redone
        atomic_write_text(run_dir / "run.json", json.dumps(record, indent=1, sort_keys=True, default=_json_default),
                          durable=False)
    return metrics


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    raise TypeError(type(value))


def execute_cell(cell):
    """`execute(*cell)` in a pool's worker, where Ctrl-C reaches the run only (`_sigint_between_runs`): a run
    under way stops and reports it as its error, and a worker between runs (reading the next job, sending a
    result back) never takes it, since a KeyboardInterrupt there can leave the pool's queue lock held and hang
    every worker and the command's exit."""
    if _SIGINT_IN_RUNS is None:  # not one of `one_pool`'s workers: this process's handler is left alone
        return execute(*cell)
    signal.signal(signal.SIGINT, _SIGINT_IN_RUNS)
    try:
        return execute(*cell)
    finally:
        while signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            except KeyboardInterrupt:  # taken on the way out: the run's outcome stands, the pool stays sound
                pass


_SIGINT_IN_RUNS = None  # in `one_pool`'s workers: their own SIGINT handler, put back for the length of each run


def _sigint_between_runs() -> None:
    """The pool's initializer: a worker ignores SIGINT except inside `execute_cell`."""
    global _SIGINT_IN_RUNS
    _SIGINT_IN_RUNS = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_jobs(scenario: Scenario, jobs: list[Job], out: Path | None, workers: int = 1, progress: bool = True,
             scheduler: str | None = None) -> list[dict]:
    """Metrics for every job, in the order of `jobs`.

    `scheduler`: a Dask scheduler address (tcp://host:8786), or a `distributed.Client`, to run the jobs on a
    cluster instead of local processes. Each job is the same pure function of (scenario, job), so results are
    identical wherever they run; `out` must then be a folder every worker can write (a shared filesystem).
    """
    return run_cells([(scenario, job, out) for job in jobs], workers, progress, scheduler)


def run_cells(cells: list[tuple[Scenario, Job, Path | None]], workers: int = 1, progress: bool = True,
              scheduler: str | None = None) -> list[dict]:
    """`run_jobs` for jobs of several scenarios (e.g. every traffic condition of a plan) in one pool: metrics in
    the order of `cells`, each (scenario, job, output folder)."""
    from tqdm import tqdm

    results: dict[int, dict] = {}
    bar = tqdm(total=len(cells), desc="runs", unit="run", disable=not progress, file=None, leave=False)
    try:
        if scheduler is not None:
            for i, metrics in _on_dask(scheduler, cells):
                results[i] = metrics
                bar.update()
        elif workers <= 1 or len(cells) <= 1:
            for i, cell in enumerate(cells):
                results[i] = execute(*cell)
                bar.update()
        else:
            with one_pool(workers, processes=min(workers, len(cells))):
                pool = shared_pool(workers)
                futures = {pool.submit(execute_cell, cell): i for i, cell in enumerate(cells)}
                with cancel_on_failure(futures):
                    for future in as_completed(futures):
                        results[futures[future]] = future.result()
                        bar.update()
    finally:
        bar.close()
    return [results[i] for i in range(len(cells))]


@contextlib.contextmanager
def cancel_on_failure(futures):
    """Ctrl-C or a failed run inside: none of `futures` (a collection the caller may keep adding to) that has not
    started starts, in a pool the rest of the command shares; the runs under way end and are kept. A worker that
    took the SIGINT inside a run reports it as that run's error."""
    try:
        yield
    except BaseException:
        for future in futures:
            future.cancel()
        raise


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one): decide's default workers."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


_SHARED: dict[int, ProcessPoolExecutor] = {}  # workers -> the pool of the command under way (`one_pool`)


@contextlib.contextmanager
def one_pool(workers: int, processes: int | None = None):
    """Inside, every batch of runs with `workers` processes (run_cells, a tuning study's batches) goes to one
    pool (`shared_pool`), made when the outermost use opens (with `processes` workers, default `workers`) and shut
    down when it closes: a command wrapped in it (`pooled`) starts its workers once, not once per racing round,
    refinement or tuning study (16 pools in a nightly-backfill decide), and they keep what they read (a parsed
    trace) between batches. Ctrl-C or a failure inside: nothing more starts. workers <= 1: no pool."""
    if workers <= 1 or workers in _SHARED:
        yield
        return
    pool = ProcessPoolExecutor(max_workers=processes or workers, initializer=_sigint_between_runs)
    _SHARED[workers] = pool
    try:
        yield
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # Ctrl-C or a failure: nothing more starts
        raise
    else:
        pool.shutdown()
    finally:
        _SHARED.pop(workers, None)


def pooled(fn):
    """`fn` runs inside `one_pool` for its `workers` keyword (a command's whole run: tune, decide)."""
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        with one_pool(kwargs.get("workers", 1)):
            return fn(*args, **kwargs)
    return inner


def shared_pool(workers: int) -> ProcessPoolExecutor | None:
    """The pool `one_pool` opened for `workers` processes, if one is open."""
    return _SHARED.get(workers)


def _on_dask(scheduler, args: list[tuple]):
    """(index, metrics) as jobs finish on a Dask cluster; `scheduler` is an address or a Client."""
    try:
        from distributed import Client, as_completed as dask_completed
    except ImportError:
        from simlab.errors import InputError

        raise InputError(None, "--scheduler-address", "needs the dask extra: pip install 'simlab[dask]'") from None
    try:
        client = scheduler if isinstance(scheduler, Client) else Client(scheduler)
    except (OSError, ValueError, TypeError) as exc:  # unreachable (distributed waits 30 s), or not an address
        from simlab.errors import InputError

        raise InputError(None, "--scheduler-address", f"cannot reach a Dask scheduler at {scheduler!r} ({exc})") from None
    try:
        futures = client.map(execute_cell, args, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for future in dask_completed(futures):
            yield index[future.key], future.result()
    finally:
        if client is not scheduler:
            client.close()
