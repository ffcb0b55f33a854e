"""`run_validate_real`: a scenario's arrivals measured on a real server per policy, against the simulation.

1. the scenario's open-loop tasks (its seed or --seed), arrivals x time scale, those before --until-ms kept;
2. per policy: the simulation of exactly those tasks with the scenario's (or the calibration's) continuous-batching
   backend -> simulated/POLICY.csv, and the options -> options/POLICY.json;
3. per repeat and per driver (simlab.runtime; the article's scheduler under Node for --node-policies): the tasks
   driven to the server -> measured/POLICY[-node]-runN.csv, with the run's key and CPU use beside it (.json). A run
   whose key matches (simlab.realcheck.kept) is kept, not measured again;
4. predicted vs measured (simlab.realcheck.compare) and the step model checked alone on every measured run
   (simlab.realcheck.stepcheck) -> the ValidateRealRecord (numbers only; the reports are rendered from it).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from simlab.errors import InputError
from simlab.realcheck import compare as cmp
from simlab.realcheck import kept
from simlab.realcheck.client import Client
from simlab.realcheck.drive import drive, scenario_tasks, simulate
from simlab.realcheck.hostcpu import CpuProbe, CpuUse
from simlab.realcheck.http import Limits, ServerError
from simlab.realcheck.measures import RECORD_COLUMNS, metrics, read_records
from simlab.realcheck.node import run_node
from simlab.realcheck.stepcheck import decode_ms_per_token, step_at_measured_load, step_error_by_window
from simlab.realcheck.urls import Target, check_url
from simlab.records import (ARTICLE_JS, RUNTIME, DecodeCheck, MeasuredRun, RunCpu, ServerProcessCpu, StepModelUsed,
                            ValidateRealRecord)

MODEL_SECONDS = 10.0  # GET /v1/models: at most this long (or --max-seconds, if shorter)
KINDS = ("interactive", "batch")


def run_validate_real(scenario_path, *, url: str, policies: list[str], out: Path, options_file: str | None = None,
                      repeats: int = 2, seed: int | None = None, time_scale: float = 1.0,
                      until_ms: float | None = None, max_seconds: float = 900.0, calibration: str | None = None,
                      node_policies: tuple[str, ...] = (), kept_only: bool = False,
                      progress=print) -> ValidateRealRecord:
    from simlab.experiments.tables import csv_text
    from simlab.atomic import atomic_write_text
    from simlab.policies import POLICY_NAMES, load_options
    from simlab.scenario import load_scenario

    target = check_url(url, "--url")
    for flag, value, ok in (("--repeats", repeats, repeats >= 1), ("--time-scale", time_scale, time_scale > 0),
                            ("--max-seconds", max_seconds, max_seconds > 0),
                            ("--until-ms", until_ms, until_ms is None or until_ms > 0)):
        if not ok:
            raise InputError(None, flag, f"must be {'at least 1' if flag == '--repeats' else 'positive'} "
                             f"(found {value:g})")
    scenario = load_scenario(scenario_path)
    if calibration:
        scenario = with_backend(scenario, Path(calibration))
    if scenario.backend.kind != "continuous-batching":
        raise InputError(scenario.path, "backend.kind", "validate-real needs a continuous-batching backend "
                         f"(calibrated with `simlab loadtest`), found {scenario.backend.kind!r}")
    bad = [p for p in policies if p not in POLICY_NAMES]
    if bad or not policies:
        raise InputError(None, "--policies", f"unknown policy {bad[0] if bad else '(none)'}; known: "
                         f"{', '.join(POLICY_NAMES)}")
    bad = [p for p in node_policies if p not in policies]
    if bad:
        raise InputError(None, "--node-policies", f"{bad[0]} is not among --policies ({', '.join(policies)})")
    seed = seed if seed is not None else scenario.experiment.seed
    tasks = scenario_tasks(scenario, seed, time_scale, until_ms)
    if not tasks:
        raise InputError(scenario.path, "workload", "no tasks arrive in the chosen window")
    if any(t.prompt_tokens is None for t in tasks):
        raise InputError(scenario.path, "workload", "every workload needs prompt_tokens and output_tokens")
    options = {p: (load_options(options_file, p) if options_file else scenario.options(p)) for p in policies}
    model = None if kept_only else asyncio.run(_model(target, min(MODEL_SECONDS, max_seconds)))

    n_i = sum(t.interactive for t in tasks)
    progress(f"{scenario.name}, seed {seed}: {len(tasks)} requests ({n_i} interactive, {len(tasks) - n_i} batch); "
             f"server {target.url}" + (f", model {model}" if model else " (kept runs only: not contacted)"))
    sims, predicted = {}, {}
    for p in policies:
        sims[p] = simulate(scenario, options[p], tasks, seed)
        atomic_write_text(out / "simulated" / f"{p}.csv", csv_text(sims[p], RECORD_COLUMNS))
        atomic_write_text(out / "options" / f"{p}.json", json.dumps(options[p].to_json_dict(), indent=1) + "\n")
        predicted[p] = metrics(sims[p])
    if node_policies:
        atomic_write_text(out / "tasks.csv", csv_text(
            [{"id": t.id, "kind": t.kind, "arrival_ms": repr(t.arrival_ms), "prompt_tokens": t.prompt_tokens,
              "output_tokens": t.output_tokens} for t in tasks],
            ("id", "kind", "arrival_ms", "prompt_tokens", "output_tokens")))

    arms = [(p, RUNTIME) for p in policies] + [(p, ARTICLE_JS) for p in node_policies]
    workload = kept.workload_sha256(tasks)
    probe = CpuProbe(target.port)
    measured = {arm: [] for arm in arms}
    runs, models = [], set()
    for k in range(1, repeats + 1):
        for p, driver in arms:
            label = p if driver == RUNTIME else f"{p} (article JS)"
            path = out / "measured" / f"{p}{'-node' if driver == ARTICLE_JS else ''}-run{k}.csv"
            meta = path.with_suffix(".json")
            key = kept.run_key(workload=workload, tasks=len(tasks), policy=p, driver=driver,
                               options=options[p].to_json_dict(), target=target, model=model, time_scale=time_scale,
                               until_ms=until_ms, max_seconds=max_seconds)
            saved, cpu = kept.saved_key(meta) if path.exists() else (None, None)
            differ = kept.differences(saved, key, ignore=("model",) if kept_only else ())
            if not differ:
                recs = read_records(path)
                use = CpuUse.from_dict(cpu) if cpu else None
                models.add(saved["model"])
                progress(f"  {label} run {k}: kept from {path}")
            elif kept_only:
                raise InputError(path, None, "no kept run to re-simulate from (--kept-runs-only): "
                                 + ("none measured" if not path.exists() else f"it differs in {', '.join(differ)}"))
            else:
                why = "" if not path.exists() else f" (the kept run differs in {', '.join(differ)})"
                progress(f"  {label} run {k}: measuring{why} ...")
                probe.start()
                recs = _measure(target, model, options[p], tasks, max_seconds, driver, out, p, path, progress)
                use = probe.stop()
                atomic_write_text(meta, kept.key_json(key, use.to_dict() if use else None))  # the run is kept
                models.add(model)
            m = metrics(recs)
            measured[(p, driver)].append(m)
            runs.append((p, driver, k, not differ, recs, use))
            progress(f"    interactive P95 {m['interactive']['p95_ms']:.0f} ms (simulated "
                     f"{predicted[p]['interactive']['p95_ms']:.0f}), batch {m['batch']['throughput_tok_s']:.0f} "
                     f"tok/s (simulated {predicted[p]['batch']['throughput_tok_s']:.0f}); "
                     f"{m['interactive']['completed'] + m['batch']['completed']}/{len(recs)} completed")
    if len(models) > 1:
        raise InputError(out / "measured", None, f"the kept runs were measured with different models "
                         f"({', '.join(sorted(map(str, models)))}); delete them or measure afresh")
    rows = cmp.compare({(p, d): predicted[p] for p, d in arms}, measured)
    verdict = cmp.verdict(rows)
    st = scenario.backend.step
    return ValidateRealRecord(
        scenario=scenario.name, scenario_file=Path(scenario_path).name, seed=seed, tasks=len(tasks), interactive=n_i,
        batch=len(tasks) - n_i, last_arrival_ms=tasks[-1].arrival_ms, time_scale=time_scale, until_ms=until_ms,
        server=target.url, model=models.pop(), repeats=repeats, calibration=calibration,
        backend=StepModelUsed(scenario.backend.max_num_seqs, st.base_ms, st.per_seq_ms, st.per_token_ms, st.admit_ms,
                              st.request_ms, st.profile),
        policies=list(policies), node_policies=list(node_policies), rows=rows, verdict=verdict,
        decode=_decode_checks(arms, sims, runs, scenario.backend),
        runs=[MeasuredRun(p, d, k, was_kept, len(recs), sum(r["outcome"] == "ok" for r in recs),
                          step_error_by_window(recs, scenario.backend, "batch"), _cpu(use))
              for p, d, k, was_kept, recs, use in runs])


async def _model(target: Target, seconds: float) -> str:
    return await Client(target, Limits.within(seconds)).model_name()


def _measure(target, model, options, tasks, max_seconds, driver, out, policy, path, progress) -> list[dict]:
    """One run through one driver, its records written to `path`. A run in which no request completed is refused
    and not written: the server accepted connections but never answered."""
    from simlab.atomic import atomic_write_text
    from simlab.experiments.tables import csv_text

    tmp = path.with_suffix(".partial.csv")
    if driver == RUNTIME:
        recs = asyncio.run(drive(target, model, options, tasks, max_seconds, progress=progress))
    else:
        run_node(target, out / "options" / f"{policy}.json", out / "tasks.csv", tmp, max_seconds)
        recs = read_records(tmp)
    if not any(r["outcome"] == "ok" for r in recs):
        tmp.unlink(missing_ok=True)
        raise ServerError(f"server {target.url}", "response to POST /v1/completions",
                          f"no request completed within --max-seconds {max_seconds:g} ({len(recs)} sent or due); "
                          "the server accepts connections but does not answer")
    if driver == RUNTIME:
        atomic_write_text(path, csv_text(recs, RECORD_COLUMNS))
    else:
        tmp.replace(path)
    return recs


def _decode_checks(arms, sims, runs, backend) -> list[DecodeCheck]:
    out = []
    for p, d in arms:
        mine = [recs for q, e, _, _, recs, _ in runs if (q, e) == (p, d)]
        for kind in KINDS:
            at_load = [step_at_measured_load(recs, backend, kind) for recs in mine]
            out.append(DecodeCheck(p, d, kind, decode_ms_per_token(sims[p], kind),
                                   [decode_ms_per_token(recs, kind) for recs in mine], [n for n, _, _ in at_load],
                                   [x for _, x, _ in at_load], [m for _, _, m in at_load]))
    return out


def _cpu(use: CpuUse | None) -> RunCpu | None:
    if use is None:
        return None
    return RunCpu(use.wall_s, use.client_cores, use.machine_cores,
                  [ServerProcessCpu(name, r, w) for name, (r, w) in use.server.items()])


def with_backend(scenario, path: Path):
    """The scenario with [backend] taken from a `simlab loadtest` snippet (its profile path made absolute), or its
    step time from a bare [backend.step] (calibrate-gpu's step.toml)."""
    import tomllib

    from pydantic import ValidationError

    from simlab.errors import read_text
    from simlab.scenario import Backend

    try:
        data = tomllib.loads(read_text(path, "calibration snippet", "a [backend] TOML snippet"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, None, f"not valid TOML ({exc})") from None
    if not isinstance(data.get("backend"), dict):
        raise InputError(path, None, "no [backend] table (expected the backend.toml that `simlab loadtest` writes)")
    step = data["backend"].get("step") or {}
    if isinstance(step, dict) and isinstance(step.get("profile"), str) and step["profile"]:
        step["profile"] = str((path.parent / step["profile"]).resolve())
    if "kind" not in data["backend"]:  # a bare [backend.step]: the scenario's backend with it
        data["backend"] = scenario.backend.model_dump(exclude_none=True) | data["backend"]
    try:
        backend = Backend.model_validate(data["backend"])
    except ValidationError as exc:
        raise InputError(path, "backend", str(exc.errors()[0]["msg"])) from None
    return scenario.model_copy(update={"backend": backend})
