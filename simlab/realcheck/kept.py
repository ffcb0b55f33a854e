"""Which measured runs validate-real may keep: a run is reused only when everything it depends on is the same.

Beside each measured run (`measured/POLICY[-node]-runN.csv`) its key is written to the `.json` of the same name.
The key holds:
- the workload as drawn: a SHA-256 over every task's id, class, arrival time (ms, to the nanosecond), prompt and
  output tokens; so the scenario's arrivals, token counts, seed, `--time-scale` and `--until-ms` all count, and
  are also kept in plain view (`time_scale`, `until_ms`, `tasks`);
- the policy, its options (the scenario's [scheduler] or --options) and the driver (simlab.runtime or the article's
  scheduler under Node.js);
- the server: the checked target (loopback address and port) and the model it reports on GET /v1/models;
- simlab's own settings of a measurement: the run's time limit (`--max-seconds`, which cuts a run short), the lead
  before the origin and what each request asks for beyond its token counts (simlab.realcheck.client.REQUEST;
  with `--engine-priority`, also `engine_priority`: the `priority` each class sends; absent without it, so the
  keys of runs measured without it are unchanged).
A change of any of them measures the run again; `differences` names what changed, for the progress line.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from simlab.realcheck.client import REQUEST
from simlab.realcheck.drive import LEAD_MS
from simlab.realcheck.urls import Target

KEY_FORMAT = 2  # 1: the identity of earlier simlab versions (scenario name, seed, task count, options)


def workload_sha256(tasks) -> str:
    h = hashlib.sha256()
    for t in tasks:
        h.update(f"{t.id},{t.kind},{t.arrival_ms:.6f},{t.prompt_tokens},{t.output_tokens}\n".encode())
    return h.hexdigest()


def run_key(*, workload: str, tasks: int, policy: str, driver: str, options: dict, target: Target, model: str | None,
            time_scale: float, until_ms: float | None, max_seconds: float,
            priorities: dict[str, int] | None = None) -> dict:
    key = {"format": KEY_FORMAT, "workload_sha256": workload, "tasks": tasks, "time_scale": time_scale,
           "until_ms": until_ms, "policy": policy, "driver": driver, "options": options, "server": target.netloc,
           "model": model, "max_seconds": max_seconds, "lead_ms": LEAD_MS, "request": REQUEST}
    if priorities is not None:
        key["engine_priority"] = priorities
    return key


def saved_key(meta: Path) -> tuple[dict | None, dict | None]:
    """(key, cpu) from a run's .json; (None, None) when missing or unreadable (the run is then measured again)."""
    from simlab.errors import CONFIG_MAX_BYTES, InputError, read_text

    if not meta.exists():
        return None, None
    try:  # bounded: a damaged or foreign file in the output folder is a run to measure again, not a hang
        data = json.loads(read_text(meta, "kept-run metadata", "JSON", CONFIG_MAX_BYTES))
    except (InputError, ValueError):
        return None, None
    if not isinstance(data, dict) or not isinstance(data.get("key"), dict):
        return None, None
    return data["key"], data.get("cpu")


def differences(saved: dict | None, key: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """The key's fields that differ (all of them, by name, for a missing key or an older format)."""
    if saved is None or saved.get("format") != key["format"]:
        return ["format"]
    names = list(key) + [k for k in saved if k not in key]  # a field only the saved run has differs too
    return [k for k in names if k not in ignore and saved.get(k) != _plain(key.get(k))]


def _plain(value):
    """As the key reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def key_json(key: dict, cpu: dict | None) -> str:
    return json.dumps({"key": key, "cpu": cpu}, indent=1) + "\n"
