"""The Python API for notebooks and scripts: the commands' work, returning their records (simlab/records.py), each
with `.to_frame()` for pandas. `import simlab` stays light: these load on first use (simlab/__init__.py).

    >>> import simlab
    >>> rec = simlab.ab("scenarios/seed-article.toml", replications=2)   # doctest: +SKIP
    >>> rec.to_frame().groupby("policy")["interactive_p95_ms"].mean()     # doctest: +SKIP

docs/python-api.md has examples that a test runs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from simlab.errors import InputError


class SimlabWarning(UserWarning):
    """What the commands print as `warning: ...` (the traffic beyond the backend's capacity, too few requests a
    run for a P95, a default outside its searched range), issued by the Python API through `warnings`."""


def _warn(message: str) -> None:
    warnings.warn(message, SimlabWarning, stacklevel=2)


def _capacity(scenario, held_out: bool = False) -> None:
    """The commands' capacity check before any run: the scenario's traffic and, for decide, each held-out
    condition's."""
    from simlab.experiments.capacity import announce

    announce(scenario, _warn, held_out)


def _scenario(scenario):
    from simlab.scenario import Scenario, load_scenario

    return scenario if isinstance(scenario, Scenario) else load_scenario(scenario)


def _options(scenario, options, policy):
    """Options from a file, a dict (camelCase, as in best-options.json), SchedulerOptions, or the scenario's."""
    from simlab.policies import SchedulerOptions, load_options, options_from_dict

    if options is None:
        return scenario.options(policy)
    if isinstance(options, SchedulerOptions):
        return options
    if isinstance(options, dict):
        return options_from_dict({**options, **({"policy": policy} if policy else {})}, "options")
    return load_options(options, policy=policy)


def ab(scenario, *, policies=None, seed: int | None = None, replications: int | None = None, options=None,
       out: str | Path | None = None, workers: int = 1, baseline: str = "unscheduled", frontier: bool = True,
       figures: bool = False, progress: bool = False):
    """`simlab ab`: every policy on common seeds; returns the AbRecord. With `frontier`, the static frontier's
    verdict is judged too (record.verdict; its DecideRecord is decision.json in `out`). `out=None` writes nothing."""
    from simlab.experiments.ab import bound_warning, run_ab, store
    from simlab.experiments.metrics import few_requests_warning

    s = _scenario(scenario)
    opts = _options(s, options, None)
    policies = list(policies or s.experiment.policies)
    first = s.experiment.seed if seed is None else seed
    seeds = list(range(first, first + (replications or s.experiment.replications)))
    out = None if out is None else Path(out)
    _capacity(s)
    record = run_ab(s, opts, policies, seeds, out, workers, baseline if baseline in policies else policies[0],
                    progress=progress)
    for message in (bound_warning(s, record.bounds),
                    few_requests_warning(record.rows, "run")):
        if message is not None:
            _warn(message)
    if frontier:
        from simlab.decision.ab import ab_decision
        from simlab.reporting.words import ab_verdict

        decision = ab_decision(s, opts, record, out, workers, progress,
                               adaptive_label="adaptive" if options is not None else "adaptive-defaults")
        if decision is not None:
            record.verdict = ab_verdict(decision)
    if out is not None:
        from simlab.reporting.blocks.ab import write_report

        if figures:
            from simlab.reporting.figures.ab import ab_figures

            record.figures = ab_figures(out, record)
        record = store(record, out)
        write_report(record, out)
    return record


def decide(scenario, *, trials: int | None = None, max_trials: int | None = None, replications: int | None = None,
           options=None, out: str | Path | None = None, workers: int | None = None, exhaustive: bool = False,
           figures: bool = False, progress: bool = False):
    """`simlab decide`: tune every family ([decision] families) with `trials` trials each, race on held-out
    traffic, confirm on fresh seeds (while the answer hangs on the tuning budget, the searches double up to
    `max_trials`, default 4 x the larger of trials and [decision] trials); returns the DecideRecord and writes
    its folder (default results/SCENARIO/decide, as the command): result.json, the CSV tables, report.md and,
    when the answer is exported, best-options.json. `workers`: processes (default: the cores this process may use;
    the answer does not depend on it)."""
    from simlab.decision import files
    from simlab.decision.run import run_decide
    from simlab.reporting.blocks.decide import write_report

    from simlab.experiments.runner import usable_cores

    s = _scenario(scenario)
    folder = Path(out) if out is not None else Path("results") / s.name / "decide"
    workers = usable_cores() if workers is None else workers
    _capacity(s, held_out=True)
    record = run_decide(s, _options(s, options, "adaptive"), folder, trials=trials, replications=replications,
                        workers=workers, progress=progress, exhaustive=exhaustive, max_trials=max_trials, warn=_warn)
    if figures:
        from simlab.reporting.figures.decision import decision_figures

        record.figures = decision_figures(record, folder)
    files.write(record, folder)
    write_report(record, folder)
    return record


def tune(scenario, *, trials: int | None = None, options=None, out: str | Path | None = None, workers: int = 1,
         mode: str | None = None, objective: str | None = None, force: bool = False, progress: bool = False):
    """`simlab tune`: the Optuna study, validated on held-out traffic; returns the TuneRecord (folder default
    results/SCENARIO/tune; a rerun continues the study) with its report.md and figures, as the command does."""
    import time

    from simlab.reporting.blocks.tune import write_files
    from simlab.tuning.run import Refused, run_tune

    s = _scenario(scenario)
    folder = Path(out) if out is not None else Path("results") / s.name / "tune"
    started = time.perf_counter()
    _capacity(s, held_out=True)
    try:
        record = run_tune(s, _options(s, options, "adaptive"), folder, trials=trials, workers=workers, mode=mode,
                          objective=objective, force=force, progress=progress, warn=_warn)
    except Refused as refused:  # nothing exported, but the study's report and figures are written, as by the command
        write_files(refused.record, folder, time.perf_counter() - started)
        raise
    write_files(record, folder, time.perf_counter() - started)
    return record


def load(path: str | Path):
    """The record a simlab command wrote: a folder (its result.json) or a record file (result.json, ab's
    decision.json). InputError (with the file and field) for anything else."""
    from simlab import records

    p = Path(path)
    if p.is_dir():
        p = p / records.RESULT_FILE
    if not p.exists():
        raise InputError(path, None, "no such file or folder; expected a simlab output folder or its result.json")
    return records.load(p)
