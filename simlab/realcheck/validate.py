"""`run_validate_real`: a scenario's arrivals measured on a real server per policy, against the simulation.

1. the scenario's open-loop tasks (its seed or --seed), arrivals x time scale, those before --until-ms kept;
2. per policy: the simulation of exactly those tasks with the scenario's (or the calibration's) continuous-batching
   backend -> simulated/POLICY.csv, and the options -> options/POLICY.json;
3. per repeat and per driver (simlab.runtime; the article's scheduler under Node for --node-policies): the tasks
   driven to the server -> measured/POLICY[-node]-runN.csv, with the run's key and CPU use beside it (.json). A run
   whose key matches (simlab.realcheck.kept) is kept, not measured again;
   With --engine-priority every request carries vLLM's `priority` (drive.ENGINE_PRIORITY: interactive 0, batch 1;
   the server must run `--scheduling-policy priority`) and the simulation's backend schedules by priority
   (simlab.world.backends.kv_batching, scheduling = "priority", with the scenario's KV cache);
4. predicted vs measured (simlab.realcheck.compare) and the step model checked alone on every measured run
   (simlab.realcheck.stepcheck) -> the ValidateRealRecord (numbers only; the reports are rendered from it).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from simlab.errors import InputError
from simlab.realcheck import compare as cmp
from simlab.realcheck import kept
from simlab.realcheck.client import Client
from simlab.realcheck.drive import ENGINE_PRIORITY, drive, scenario_tasks, simulate
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


@dataclass
class Inputs:
    """What validate-real measures and simulates, checked."""
    target: Target
    scenario: object  # simlab.scenario.Scenario, with the --calibration's backend
    seed: int
    tasks: list
    options: dict  # policy -> SchedulerOptions
    arms: list[tuple[str, str]]  # (policy, driver) in report order
    time_scale: float
    until_ms: float | None
    max_seconds: float
    priorities: dict[str, int] | None = None  # --engine-priority: vLLM's request priority per class


@dataclass
class Run:
    policy: str
    driver: str
    k: int
    kept: bool
    records: list[dict]
    cpu: CpuUse | None
    model: str


def run_validate_real(scenario_path, *, url: str, policies: list[str], out: Path, options_file: str | None = None,
                      repeats: int = 2, seed: int | None = None, time_scale: float = 1.0,
                      until_ms: float | None = None, max_seconds: float = 900.0, calibration: str | None = None,
                      node_policies: tuple[str, ...] = (), kept_only: bool = False, engine_priority: bool = False,
                      progress=print, out_flag: str | None = "--out") -> ValidateRealRecord:
    """`out` is made (simlab.outputs.output_folder, InputError at `out_flag`) once every input is checked."""
    from simlab.outputs import output_folder

    if repeats < 1:
        raise InputError(None, "--repeats", f"must be at least 1 (found {repeats})")
    inputs = check_inputs(scenario_path, url, policies, node_policies, options_file, seed, time_scale, until_ms,
                          max_seconds, calibration, engine_priority)
    out = output_folder(out, out_flag)
    model = None if kept_only else asyncio.run(_model(inputs.target, min(MODEL_SECONDS, max_seconds)))
    tasks, scenario = inputs.tasks, inputs.scenario
    n_i = sum(t.interactive for t in tasks)
    progress(f"{scenario.name}, seed {inputs.seed}: {len(tasks)} requests ({n_i} interactive, {len(tasks) - n_i} "
             f"batch); server {inputs.target.url}" + (f", model {model}" if model else
                                                       " (kept runs only: not contacted)"))
    sims = _simulate(inputs, node_policies, out)
    predicted = {p: metrics(s) for p, s in sims.items()}
    runs = []
    for k in range(1, repeats + 1):
        for policy, driver in inputs.arms:
            run = _run(inputs, policy, driver, k, model, kept_only, out, progress)
            runs.append(run)
            _report_run(run, predicted[policy], progress)
    models = {run.model for run in runs}
    if len(models) > 1:
        raise InputError(out / "measured", None, f"the kept runs were measured with different models "
                         f"({', '.join(sorted(models))}); delete them or measure afresh")
    measured = {arm: [metrics(r.records) for r in runs if (r.policy, r.driver) == arm] for arm in inputs.arms}
    rows = cmp.compare({(p, d): predicted[p] for p, d in inputs.arms}, measured)
    verdict = cmp.verdict(rows)
    st = scenario.backend.step
    return ValidateRealRecord(
        scenario=scenario.name, scenario_file=Path(scenario_path).name, seed=inputs.seed, tasks=len(tasks),
        interactive=n_i, batch=len(tasks) - n_i, last_arrival_ms=tasks[-1].arrival_ms, time_scale=time_scale,
        until_ms=until_ms, server=inputs.target.url, model=models.pop(), repeats=repeats, calibration=calibration,
        backend=StepModelUsed(scenario.backend.max_num_seqs, st.base_ms, st.per_seq_ms, st.per_token_ms, st.admit_ms,
                              st.request_ms, st.profile),
        policies=list(policies), node_policies=list(node_policies), rows=rows, verdict=verdict,
        engine_priority=engine_priority, kv_cache_tokens=scenario.backend.kv_cache_tokens,
        decode=_decode_checks(inputs.arms, sims, runs, scenario.backend),
        runs=[MeasuredRun(r.policy, r.driver, r.k, r.kept, len(r.records),
                          sum(x["outcome"] == "ok" for x in r.records),
                          step_error_by_window(r.records, scenario.backend, "batch"), _cpu(r.cpu)) for r in runs])


def check_inputs(scenario_path, url, policies, node_policies, options_file, seed, time_scale, until_ms, max_seconds,
                 calibration, engine_priority: bool = False) -> Inputs:
    """Every input checked (InputError naming the flag, file or field), before anything is sent or written."""
    from simlab.policies import POLICY_NAMES, load_options
    from simlab.scenario import load_scenario

    target = check_url(url, "--url")
    for flag, value in (("--time-scale", time_scale), ("--max-seconds", max_seconds), ("--until-ms", until_ms)):
        if value is not None and not value > 0:
            raise InputError(None, flag, f"must be positive (found {value:g})")
    scenario = load_scenario(scenario_path)
    if calibration:
        scenario = with_backend(scenario, Path(calibration))
    if scenario.backend.kind != "continuous-batching":
        raise InputError(scenario.path, "backend.kind", "validate-real needs a continuous-batching backend "
                         f"(calibrated with `simlab loadtest`), found {scenario.backend.kind!r}")
    scenario = _engine_scheduling(scenario, engine_priority, node_policies)
    bad = [p for p in policies if p not in POLICY_NAMES]
    if bad or not policies:
        raise InputError(None, "--policies", f"unknown policy {bad[0] if bad else '(none)'}; known: "
                         f"{', '.join(POLICY_NAMES)}")
    bad = [p for p in node_policies if p not in policies]
    if bad:
        raise InputError(None, "--node-policies", f"{bad[0]} is not among --policies ({', '.join(policies)})")
    if seed is not None and seed < 0:
        raise InputError(None, "--seed", f"must be 0 or more (found {seed})")
    seed = seed if seed is not None else scenario.experiment.seed
    tasks = scenario_tasks(scenario, seed, time_scale, until_ms)
    if not tasks:
        raise InputError(scenario.path, "workload", "no tasks arrive in the chosen window")
    if any(t.prompt_tokens is None for t in tasks):
        raise InputError(scenario.path, "workload", "every workload needs prompt_tokens and output_tokens")
    options = {p: (load_options(options_file, p) if options_file else scenario.options(p)) for p in policies}
    for p, o in options.items():  # the runtime scheduler refuses options under which a submit could wait forever
        if (why := o.waits_forever()) is not None:
            raise InputError(options_file or scenario.path, None if options_file else "scheduler", f"policy {p}: {why}")
    arms = [(p, RUNTIME) for p in policies] + [(p, ARTICLE_JS) for p in node_policies]
    return Inputs(target, scenario, seed, tasks, options, arms, time_scale, until_ms, max_seconds,
                  dict(ENGINE_PRIORITY) if engine_priority else None)


def _engine_scheduling(scenario, engine_priority: bool, node_policies):
    """The scenario with the engine's scheduling as measured: by priority with --engine-priority (the KV backend's
    scheduling = "priority"), else as the scenario says, which must then not be priority: requests sent without a
    priority would be measured against an engine simulated with one."""
    if not engine_priority:
        if scenario.backend.scheduling == "priority":
            raise InputError(scenario.path, "backend.scheduling", 'is "priority": pass --engine-priority so that '
                             "the requests carry their class's priority (and start the server with "
                             "--scheduling-policy priority)")
        return scenario
    if node_policies:
        raise InputError(None, "--node-policies", "the article's scheduler under Node.js sends no request priority; "
                         "it cannot be combined with --engine-priority")
    if scenario.backend.preempt_on == "kv-or-seqs":
        raise InputError(scenario.path, "backend.preempt_on", 'is "kv-or-seqs", which vLLM as released does not do '
                         '(issue 40004); the real engine is simulated with preempt_on = "kv"')
    backend = scenario.backend.model_copy(update={"scheduling": "priority"})
    return scenario.model_copy(update={"backend": backend})


def _simulate(inputs: Inputs, node_policies, out: Path) -> dict[str, list[dict]]:
    """Each policy simulated on exactly the tasks (simulated/), its options exported (options/), and the tasks
    written for the Node driver (tasks.csv)."""
    from simlab.store import atomic_write_text
    from simlab.store import csv_text

    sims = {}
    for p, options in inputs.options.items():
        sims[p] = simulate(inputs.scenario, options, inputs.tasks, inputs.seed)
        atomic_write_text(out / "simulated" / f"{p}.csv", csv_text(sims[p], RECORD_COLUMNS, None))  # raw: exact
        atomic_write_text(out / "options" / f"{p}.json", json.dumps(options.to_json_dict(), indent=1) + "\n")
    if node_policies:
        atomic_write_text(out / "tasks.csv", csv_text(
            [{"id": t.id, "kind": t.kind, "arrival_ms": repr(t.arrival_ms), "prompt_tokens": t.prompt_tokens,
              "output_tokens": t.output_tokens} for t in inputs.tasks],
            ("id", "kind", "arrival_ms", "prompt_tokens", "output_tokens"), None))
    return sims


def _run(inputs: Inputs, policy: str, driver: str, k: int, model: str | None, kept_only: bool, out: Path,
         progress) -> Run:
    """Run k of one policy through one driver: kept when its key matches, else measured (and kept)."""
    from simlab.store import atomic_write_text

    label = policy if driver == RUNTIME else f"{policy} (article JS)"
    path = out / "measured" / f"{policy}{'-node' if driver == ARTICLE_JS else ''}-run{k}.csv"
    meta = path.with_suffix(".json")
    key = kept.run_key(workload=kept.workload_sha256(inputs.tasks), tasks=len(inputs.tasks), policy=policy,
                       driver=driver, options=inputs.options[policy].to_json_dict(), target=inputs.target,
                       model=model, time_scale=inputs.time_scale, until_ms=inputs.until_ms,
                       max_seconds=inputs.max_seconds, priorities=inputs.priorities)
    saved, cpu = kept.saved_key(meta) if path.exists() else (None, None)
    differ = kept.differences(saved, key, ignore=("model",) if kept_only else ())
    if not differ:
        progress(f"  {label} run {k}: kept from {path}")
        return Run(policy, driver, k, True, read_records(path), CpuUse.from_dict(cpu) if cpu else None,
                   saved["model"])
    if kept_only:
        raise InputError(path, None, "no kept run to re-simulate from (--kept-runs-only): "
                         + ("none measured" if not path.exists() else f"it differs in {', '.join(differ)}"))
    why = "" if not path.exists() else f" (the kept run differs in {', '.join(differ)})"
    progress(f"  {label} run {k}: measuring{why} ...")
    probe = CpuProbe(inputs.target.port)
    probe.start()
    recs = _measure(inputs.target, model, inputs.options[policy], inputs.tasks, inputs.max_seconds, driver, out,
                    policy, path, progress, inputs.priorities)
    use = probe.stop()
    atomic_write_text(meta, kept.key_json(key, use.to_dict() if use else None))  # the run is kept from now on
    return Run(policy, driver, k, False, recs, use, model)


def _report_run(run: Run, predicted: dict, progress) -> None:
    m = metrics(run.records)
    progress(f"    interactive P95 {m['interactive']['p95_ms']:.0f} ms (simulated "
             f"{predicted['interactive']['p95_ms']:.0f}), batch {m['batch']['throughput_tok_s']:.0f} tok/s "
             f"(simulated {predicted['batch']['throughput_tok_s']:.0f}); "
             f"{m['interactive']['completed'] + m['batch']['completed']}/{len(run.records)} completed")


async def _model(target: Target, seconds: float) -> str:
    return await Client(target, Limits.within(seconds)).model_name()


def _measure(target, model, options, tasks, max_seconds, driver, out, policy, path, progress,
             priorities=None) -> list[dict]:
    """One run through one driver, its records written to `path`. A run in which no request completed is refused
    and not written: the server accepted connections but never answered."""
    from simlab.store import atomic_write_text
    from simlab.store import csv_text

    tmp = path.with_suffix(".partial.csv")
    if driver == RUNTIME:
        recs = asyncio.run(drive(target, model, options, tasks, max_seconds, progress=progress,
                                 priorities=priorities))
    else:
        run_node(target, out / "options" / f"{policy}.json", out / "tasks.csv", tmp, max_seconds)
        recs = read_records(tmp)
    if not any(r["outcome"] == "ok" for r in recs):
        tmp.unlink(missing_ok=True)
        raise ServerError(f"server {target.url}", "response to POST /v1/completions",
                          f"no request completed within --max-seconds {max_seconds:g} ({len(recs)} sent or due); "
                          "the server accepts connections but does not answer")
    if driver == RUNTIME:
        atomic_write_text(path, csv_text(recs, RECORD_COLUMNS, None))  # raw: exact
    else:
        tmp.replace(path)
    return recs


def _decode_checks(arms, sims, runs: list[Run], backend) -> list[DecodeCheck]:
    out = []
    for p, d in arms:
        mine = [r.records for r in runs if (r.policy, r.driver) == (p, d)]
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

    from simlab.errors import CONFIG_MAX_BYTES, read_text
    from simlab.scenario import Backend

    try:
        data = tomllib.loads(read_text(path, "calibration snippet", "a [backend] TOML snippet", CONFIG_MAX_BYTES))
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
