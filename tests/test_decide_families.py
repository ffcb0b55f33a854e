"""`simlab decide` ranks every policy family after equal tuning budgets: the per-family search spaces, the arms each
family puts on the frontier, and an end-to-end decision on a tiny scenario."""

from __future__ import annotations

import csv
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.decision.families import ENGINE, TUNED, families_of
from simlab.decision.frontier import decide_specs
from simlab.policies import POLICIES
from simlab.scenario import load_scenario
from simlab.tuning.space import build_space, family_space, options_for, params_of, rounded
from tests.helpers import ROOT, simlab

TINY = """
name = "tiny-families"
duration_ms = 6_000
slo_p95_ms = 400

[backend]
kind = "slots"
slots = 4

[scheduler]
maxConcurrency = 4
batchMaxConcurrency = 3
batchMinConcurrency = 1
interactiveRpsThreshold = 8
interactiveP95LatencyMs = 300
windowMs = 3000

[[workload]]
name = "chat"
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 8 }
service = { dist = "lognormal", median = 80, p95 = 300 }

[[workload]]
name = "backlog"
class = "batch"
arrivals = { process = "burst", count = 30, at_ms = 0 }
service = { dist = "lognormal", median = 300, p95 = 700 }

[conditions]
load = [1.5]

[tune]
seeds = 2
batch_size = 2
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("families") / "tiny.toml"
    path.write_text(TINY)
    return path


# --- the search space of each family ---------------------------------------------------------------------------

def test_the_adaptive_space_is_the_one_simlab_tune_searches(tiny):
    s = load_scenario(tiny)
    base = s.options("adaptive")
    space = family_space("adaptive", s, base)
    assert space == build_space(s, base) and space.family == "adaptive" and not space.choices
    assert space.bounds == {"interactiveRpsThreshold": (0.5, 200.0), "interactiveP95LatencyMs": (20.0, 2000.0),
                            "windowMs": (1000.0, 60_000.0), "smoothingAlpha": (0.05, 1.0),
                            "batchMaxConcurrency": (1, 3), "batchMinConcurrency": (1, 3)}
    assert space.below == (("batchMinConcurrency", "batchMaxConcurrency", 0.0),)


@pytest.mark.parametrize("family", ["holdback", "aimd", "gradient2"])
def test_a_gate_searches_the_ranges_its_policy_declares(tiny, family):
    s = load_scenario(tiny)
    space = family_space(family, s, s.options("adaptive"))
    ranges = POLICIES[family].TUNABLE
    assert set(space.bounds) == set(ranges) and space.family == family
    for key, r in ranges.items():
        assert space.bounds[key] == tuple(float(v) for v in r.bounds(4))
        assert (key in space.integer) == r.integer and (key in space.log) == r.log
    if family == "holdback":  # a slots backend has no KV cache: the kv signal is not searched
        assert space.choices == {"saturationSignal": ("utilization", "queue", "inflight")}


class DrawnTrial:
    """An Optuna trial whose suggestions Hypothesis draws (anywhere in the range it is asked for)."""

    def __init__(self, data):
        self.data = data

    def suggest_int(self, name, low, high, log=False):
        return self.data.draw(st.integers(low, high), label=name)

    def suggest_float(self, name, low, high, log=False):
        return self.data.draw(st.floats(low, high, allow_nan=False), label=name)

    def suggest_categorical(self, name, choices):
        return self.data.draw(st.sampled_from(choices), label=name)


@settings(max_examples=60, deadline=None)
@given(family=st.sampled_from(TUNED), data=st.data())
def test_every_point_of_a_family_space_is_valid_options_of_that_family(family, data):
    """Whatever a trial suggests, the options evaluated are the family's, valid, and inside the ranges after
    rounding; the pairs a policy needs ordered stay ordered (holdback's ceilings, aimd's limits, gradient2's
    partitions within one limit)."""
    s = load_scenario(ROOT / "docs" / "examples" / "tiny.toml")
    # the scenario's own batch floor, up to its ceiling: a searched ceiling may fall below it (holdback)
    base = s.options("adaptive").with_changes(batch_min_concurrency=data.draw(st.integers(1, 3), label="floor"))
    space = family_space(family, s, base)
    params = space.suggest(DrawnTrial(data))
    options = options_for(base, params, s, space)  # validates, or raises
    assert options.policy == family
    chosen = options.to_json_dict()
    for key, (lo, hi) in space.bounds.items():
        value = rounded(key, params[key], space.integer)
        assert chosen[key] == value
        if key in space.integer:
            assert lo <= value <= hi
    if family == "holdback":
        assert options.value("minCeiling") < options.value("maxCeiling")
    if family == "aimd":
        assert options.value("batchMinConcurrency") <= options.value("batchMaxConcurrency")
    if family == "gradient2":
        assert options.value("interactivePartition") + options.value("batchPartition") <= 1 + 1e-12


@pytest.mark.parametrize("family", TUNED)
def test_the_defaults_trial_sits_inside_the_family_space(tiny, family):
    s = load_scenario(tiny)
    base = s.options("adaptive")
    space = family_space(family, s, base)
    params = params_of(base.with_changes(policy=family), space)
    for key, (lo, hi) in space.bounds.items():
        assert lo <= params[key] <= hi, key


# --- the arms -----------------------------------------------------------------------------------------------

def test_every_family_the_scenario_can_run_is_ranked_by_default(tiny):
    s = load_scenario(tiny)
    assert families_of(s) == list(TUNED)  # a slots backend: no engine priority
    kv = load_scenario(ROOT / "scenarios" / "gpu-kv-pressure-priority.toml")
    assert families_of(kv) == [*TUNED, ENGINE]
    assert ENGINE not in families_of(load_scenario(ROOT / "scenarios" / "gpu-kv-pressure.toml"))  # FCFS engine


def test_engine_priority_is_the_ungated_arm_on_a_priority_engine():
    s = load_scenario(ROOT / "scenarios" / "gpu-kv-pressure-priority.toml")
    base = s.options("adaptive")
    specs = {a.label: a for a in decide_specs(base, s, [], tuple(families_of(s)))}
    assert specs[ENGINE].family == ENGINE and specs[ENGINE].options.policy == "unscheduled"
    assert "unscheduled" not in specs  # the same runs: the arm is the deployable one
    assert {f"{f}-defaults" for f in TUNED} <= set(specs)
    assert specs["holdback-defaults"].options.policy == "holdback"


def test_adaptive_alone_gives_the_arms_decide_always_compared(tiny):
    s = load_scenario(tiny)
    base = s.options("adaptive")
    labels = [a.label for a in decide_specs(base, s, [], ("adaptive",))]
    assert labels == ["static-1", "static-2", "static-3", "adaptive-defaults", "priority", "unscheduled"]


@settings(max_examples=30, deadline=None)
@given(chosen=st.sets(st.sampled_from(TUNED), min_size=1))
def test_the_arms_are_the_chosen_families_and_the_static_frontier(chosen):
    """Whatever families are chosen: each has its defaults arm, no other family has an arm, every static cap is
    there, and no configuration runs twice."""
    s = load_scenario(ROOT / "docs" / "examples" / "tiny.toml")
    base = s.options("adaptive")
    families = tuple(f for f in TUNED if f in chosen)
    specs = decide_specs(base, s, [], families)
    deployable = {a.family for a in specs} - {"static", "baseline"}
    assert deployable == set(families)
    assert {a.label for a in specs if a.family in TUNED} == {f"{f}-defaults" for f in families}
    assert [a.cap for a in specs if a.family == "static"] == [1, 2, 3]
    assert len({json.dumps(a.options.to_json_dict(), sort_keys=True) for a in specs}) == len(specs)


def test_engine_priority_on_a_backend_without_it_names_the_setting(tiny, tmp_path):
    path = tmp_path / "engine.toml"
    path.write_text(TINY + '\n[decision]\nfamilies = ["adaptive", "engine-priority"]\n')
    proc = simlab("decide", path, "--trials", "0", "--out", tmp_path / "out", "--quiet", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "decision.families" in proc.stderr and "scheduling = \"priority\"" in proc.stderr


def test_a_family_given_twice_is_refused(tmp_path):
    path = tmp_path / "twice.toml"
    path.write_text(TINY + '\n[decision]\nfamilies = ["aimd", "aimd"]\n')
    proc = simlab("decide", path, "--trials", "0", "--out", tmp_path / "out", "--quiet", check=False)
    assert proc.returncode == 2 and "aimd is given twice" in proc.stderr


# --- end to end ---------------------------------------------------------------------------------------------

# margins wide enough for 4 selection seeds to settle it: the choice is then confirmed on fresh units
SETTLES = "\n[decision]\np95_margin = 0.1\nthroughput_margin = 0.1\nconfirm_seeds = 2\n"


@pytest.fixture(scope="module")
def decided(tiny):
    path = tiny.parent / "settles.toml"
    path.write_text(TINY + SETTLES)
    out = tiny.parent / "out"
    proc = simlab("decide", path, "--trials", "2", "--max-trials", "2", "--replications", "4", "--out", out,
                  "--quiet", check=False)
    return proc, out


def test_decide_ranks_every_family_after_equal_budgets(decided):
    from simlab.records import load

    proc, out = decided
    # settled and confirmed, but 2 trials are within the sampler's random start-up and tuned arms tie: held back
    assert proc.returncode == 3, proc.stderr
    assert "random start-up" in proc.stderr and "rerun with --trials 20" in proc.stderr
    rec = load(out / "result.json", "decide")
    assert rec.settled and rec.confirmed and not rec.exported and rec.choice == "static-3"
    assert rec.budget_why == "start-up" and rec.trials_needed == 20
    assert set(rec.budget_arms) <= {c for f in rec.tuning.families for c in f.candidates} and rec.budget_arms
    assert [f.family for f in rec.tuning.families] == list(TUNED)
    assert {f.trials for f in rec.tuning.families} == {2} and rec.tuning.trials_per_family == 2
    with open(out / "frontier.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    families = {r["family"] for r in rows}
    assert set(TUNED) <= families
    for r in rows:  # every tuned family's arm carries its family's budget, the same for all
        assert r["tuning_trials"] == ("2" if r["family"] in TUNED else "")
    # the same search for each: the same seeds on the same search conditions
    searches = [json.loads((out / folder / "result.json").read_text())["record"]
                for folder in ("tune", "tune-holdback", "tune-aimd", "tune-gradient2")]
    assert len({json.dumps([s["seeds"], s["search_conditions"]]) for s in searches}) == 1
    assert {s["trials"] for s in searches} == {2}
    assert [s["family"] for s in searches] == list(TUNED)
    # each family's best arm is judged on the same confirmation units as the choice
    assert set(TUNED) <= {a.family for a in rec.confirmation}
    assert {a.units for a in rec.confirmation} == {len(rec.confirmation_units)} == {2}


def test_each_family_records_the_trial_its_pick_came_from(decided):
    from simlab.records import load

    proc, out = decided
    rec = load(out / "result.json", "decide")
    for f in rec.tuning.families:
        search = json.loads((out / ("tune" if f.family == "adaptive" else f"tune-{f.family}") / "result.json")
                            .read_text())["record"]
        assert f.found_at == search["found_at"]
        if "{}-tuned".format(f.family) in search["candidates"]:
            assert f.found_at in range(f.trials)  # a slot of this search's budget
        else:
            assert f.found_at is None


def test_a_search_that_found_its_pick_late_says_the_budget_may_matter():
    from types import SimpleNamespace

    from simlab.reporting import words

    def record(*found):
        families = [SimpleNamespace(family=name, trials=20, found_at=at)
                    for name, at in zip(("adaptive", "holdback", "aimd"), found)]
        return SimpleNamespace(tuning=SimpleNamespace(families=families))

    assert words.budget_sentence(record(3, None, 14)) is None  # slots 0..14: within the first 75% of 20
    late = words.budget_sentence(record(3, 19, 15))
    assert late is not None
    assert "holdback in trial 20 of 20, aimd in trial 16 of 20" in late and "adaptive" not in late
    assert "a larger --trials may find better options" in late
    assert words.budget_sentence(SimpleNamespace(tuning=None)) is None
    # too few trials to tell early from late
    assert words.budget_sentence(SimpleNamespace(tuning=SimpleNamespace(
        families=[SimpleNamespace(family="adaptive", trials=2, found_at=1)]))) is None


def test_the_report_and_the_figure_list_every_family(decided):
    proc, out = decided
    report = (out / "report.md").read_text()
    assert "## Every policy family" in report
    assert "each with 2 trials on the same search units" in report
    for family in TUNED:
        assert f"| {family} |" in report
    assert (out / "figures" / "frontier.png").is_file()


def test_the_answer_says_which_gateway_an_exported_gate_is_for():
    from types import SimpleNamespace

    from simlab.reporting import words

    gate = SimpleNamespace(family="aimd", label="aimd-tuned", cap=None)
    assert "aimd gate (aimd-tuned; simlab's own options file, for simlab.runtime.Scheduler" in \
        words.family_choice_text(gate)
    assert words.options_for_text(gate).endswith('(policy "aimd")')
    engine = SimpleNamespace(family=ENGINE, label=ENGINE, cap=None)
    assert "--scheduling-policy priority" in words.family_choice_text(engine)
    assert words.options_for_text(SimpleNamespace(family="static")) == "for the production scheduler"


def test_every_family_gives_the_same_answer_whatever_the_workers(decided, tiny):
    """Each family's search proposes in seeded batches: --workers 2 gives the same arms, numbers and choice."""
    _, out = decided
    other = tiny.parent / "out-2"
    proc = simlab("decide", tiny.parent / "settles.toml", "--trials", "2", "--max-trials", "2", "--replications", "4",
                  "--out", other, "--quiet", "--workers", "2", check=False)
    assert proc.returncode == 3, proc.stderr
    for name in ("frontier.csv", "confirmation.csv", "candidate-options-NOT-VALIDATED.json"):
        assert (other / name).read_bytes() == (out / name).read_bytes(), name


def test_decide_runs_on_every_usable_core_unless_told(tiny, tmp_path, monkeypatch):
    """The default --workers is the cores the process may use (the answer does not depend on it, above), for the
    command and the Python API alike; --workers N still wins."""
    import simlab
    from simlab import cli
    from simlab.decision import run
    from simlab.experiments import runner

    seen = []

    class Stop(BaseException):  # past the command line's report of an internal error
        pass

    def fake(*args, **kwargs):
        seen.append(kwargs["workers"])
        raise Stop

    monkeypatch.setattr(runner, "usable_cores", lambda: 3)
    monkeypatch.setattr(run, "run_decide", fake)
    path = str(tiny)
    for argv in (["decide", path, "--quiet", "--out", str(tmp_path / "a")],
                 ["decide", path, "--quiet", "--workers", "1", "--out", str(tmp_path / "b")]):
        with pytest.raises(Stop):
            assert cli.main(argv) is None, "decide stopped before running"
    with pytest.raises(Stop):
        simlab.decide(path, out=tmp_path / "c")
    assert seen == [3, 1, 3]
    monkeypatch.undo()  # the real count: the cores of this machine this process may use
    assert runner.usable_cores() == len(os.sched_getaffinity(0))


def test_a_decide_starts_its_worker_processes_once(decided, tiny, tmp_path, monkeypatch):
    """Every tuning batch, racing round and refinement of one decide runs on the one pool the command opens (one
    per round and study before: 16 in a nightly-backfill decide); the answer is the one-process answer."""
    from concurrent.futures import ProcessPoolExecutor

    from simlab.decision.run import run_decide
    from simlab.experiments import runner

    made = []

    class Counted(ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("max_workers"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(runner, "ProcessPoolExecutor", Counted)  # every pool is made there
    scenario = load_scenario(tiny.parent / "settles.toml")
    base = scenario.options().with_changes(policy="adaptive")
    record = run_decide(scenario, base, tmp_path / "out", trials=2, max_trials=2, replications=4, workers=2,
                         progress=False)
    assert made == [2]
    _, out = decided
    assert record.choice == json.loads((out / "result.json").read_text())["record"]["choice"]
    assert len(record.rounds) >= 1 and record.tuning is not None  # racing and tuning both ran on it


# --- the answer against half the tuning budget ----------------------------------------------------------------


def test_the_earlier_budgets_that_race_are_half_and_every_ten_times_a_power_of_two():
    from simlab.tuning.validation import checkpoints

    assert checkpoints(20) == [10]
    assert checkpoints(10) == [5]
    assert checkpoints(60) == [40, 30, 20, 10]
    assert checkpoints(8) == [4]
    assert checkpoints(3) == [] and checkpoints(0) == []


def test_a_search_holds_the_pick_of_every_shorter_search(tiny, tmp_path):
    """Trial k is the same at every budget, so a 4-trial search's pick is what the 8-trial search reports as its
    pick after 4 trials, and it races under its own label when it differs from the 8-trial picks."""
    from simlab.tuning.run import run_tune

    scenario = load_scenario(tiny)
    base = scenario.options()
    short = run_tune(scenario, base, tmp_path / "short", trials=4, validate=False, progress=False)
    long = run_tune(scenario, base, tmp_path / "long", trials=8, validate=False, progress=False)
    assert set(long.picks_after) == {"4"} and set(short.picks_after) == {"2"}
    assert long.picks_after["4"] == short.candidates["adaptive-tuned"]
    if long.picks_after["4"] in (long.candidates["adaptive-tuned"], long.candidates.get("adaptive-tuned-lowest-p95")):
        assert "adaptive-tuned-after-4" not in long.candidates
    else:
        assert long.candidates["adaptive-tuned-after-4"] == long.picks_after["4"]


def _tuned(candidates=("adaptive-tuned", "adaptive-tuned-after-10"), trials=20):
    from types import SimpleNamespace

    return SimpleNamespace(families=[SimpleNamespace(family="adaptive", trials=trials, half=trials // 2,
                                                     candidates=list(candidates))])


def _outcome(choice, tie, equivalent=()):
    """The rule's outcome: `choice` leads, the arms in `equivalent` are shown equivalent, the rest undecided."""
    from types import SimpleNamespace

    from simlab.decision.rule import Standing

    standings = {a: Standing("feasible", "leader" if a == choice else "equivalent" if a in equivalent
                             else "undecided") for a in tie}
    return SimpleNamespace(choice=choice, tie_set=list(tie), standings=standings)


def test_a_tie_set_only_the_longer_search_found_depends_on_the_budget():
    from simlab.decision.run import budget_moves

    shorter = {"adaptive-tuned-after-10"}  # what a 10-trial run races from the search
    # the tie set is the 20-trial pick alone: a 10-trial run would not have raced it
    assert budget_moves(_tuned(), _outcome("adaptive-tuned", ["adaptive-tuned"]), shorter) == (
        ["adaptive-tuned"], "tie-set")
    # ... not when the shorter run's pick, a static cap or a family's defaults is shown equivalent to it
    for other in ("adaptive-tuned-after-10", "static-4", "adaptive-defaults"):
        assert budget_moves(_tuned(), _outcome("adaptive-tuned", ["adaptive-tuned", other], [other]),
                            shorter) == ([], "")
    # nor when the choice is the shorter run's own pick, or a static cap
    assert budget_moves(_tuned(), _outcome("adaptive-tuned-after-10", ["adaptive-tuned-after-10"]),
                        shorter) == ([], "")
    assert budget_moves(_tuned(), _outcome("static-4", ["static-4", "adaptive-tuned"]), shorter) == ([], "")
    # no tuning, no choice, or a budget too small to halve (no shorter run known) past the start-up: nothing
    assert budget_moves(None, _outcome("adaptive-tuned", []), shorter) == ([], "")
    assert budget_moves(_tuned(), _outcome(None, []), shorter) == ([], "")
    small = _tuned()
    small.families[0].half = None
    assert budget_moves(small, _outcome("adaptive-tuned", ["adaptive-tuned"]), set()) == ([], "")


def test_a_late_choice_beside_arms_only_undecided_depends_on_the_budget():
    """real-engine-priority at 20 trials: the choice came from trial 14 of its search, a static cap and the
    shorter run's picks only undecided beside it; at 40 trials the search moved on again. The undecided arms do
    not hold the answer: the shorter run would not give it."""
    from simlab.decision.run import budget_moves

    shorter = {"adaptive-tuned-after-10"}
    tie = ["adaptive-tuned", "static-4", "adaptive-tuned-after-10"]
    assert budget_moves(_tuned(), _outcome("adaptive-tuned", tie), shorter) == (["adaptive-tuned"], "choice")
    # one of them shown equivalent holds it
    assert budget_moves(_tuned(), _outcome("adaptive-tuned", tie, ["static-4"]), shorter) == ([], "")
    # a late arm shown equivalent does not
    assert budget_moves(_tuned(("adaptive-tuned", "adaptive-tuned-lowest-p95", "adaptive-tuned-after-10")),
                        _outcome("adaptive-tuned", [*tie, "adaptive-tuned-lowest-p95"],
                                 ["adaptive-tuned-lowest-p95"]), shorter) == (["adaptive-tuned"], "choice")


def test_searches_within_the_random_start_up_hold_back_a_tie_set_with_tuned_arms():
    """gpu-kv-pressure at 10 trials exported a pick found at trial 2 of a random start-up; 20 trials found
    options 13% better on P95. Within the start-up no lookback is evidence: any tuned arm in the tie set holds
    the answer back, whatever the arm found early; a tie set of static caps and defaults alone does not."""
    from simlab.decision.run import budget_moves, trials_to_tell
    from simlab.tuning import STARTUP_TRIALS

    early = _tuned(trials=STARTUP_TRIALS)
    shorter = {"adaptive-tuned-after-10"}  # even the half-budget run's own pick
    assert budget_moves(early, _outcome("static-16", ["static-16", "adaptive-tuned-after-10"]), shorter) == (
        ["adaptive-tuned-after-10"], "start-up")
    assert budget_moves(early, _outcome("static-16", ["static-16", "adaptive-defaults"]), shorter) == ([], "")
    tiny = _tuned(trials=4)
    tiny.families[0].half = None  # too small to halve: the start-up still holds it back
    assert budget_moves(tiny, _outcome("adaptive-tuned", ["adaptive-tuned"]), set()) == (
        ["adaptive-tuned"], "start-up")
    # one trial past the start-up, the lookback judges again
    assert budget_moves(_tuned(trials=STARTUP_TRIALS + 1), _outcome("static-16", ["static-16", "adaptive-tuned"],
                                                                   ["adaptive-tuned"]), shorter) == ([], "")
    assert trials_to_tell(4, "start-up") == 2 * STARTUP_TRIALS
    assert trials_to_tell(20, "choice") == trials_to_tell(20, "tie-set") == 40
    assert trials_to_tell(20, "") is None


def test_a_budget_dependent_answer_says_so_and_names_the_trials_that_would_tell():
    from types import SimpleNamespace

    from simlab.reporting import words

    r = SimpleNamespace(choice="adaptive-tuned", trials_needed=40, tuning=_tuned(), budget_arms=["adaptive-tuned"],
                        settled=True, selection=[], arm=lambda label: SimpleNamespace(family="adaptive"))
    said = words.trials_sentence(r)
    assert "the tie set is adaptive-tuned alone, found only in the second half of its search" in said
    assert "a run with 10 of the 20 trials would not race it" in said
    assert "--trials 40" in said and "Not exported" in said
    assert words.not_exported(r).endswith("rerun with --trials 40")
    r.budget_arms = ["adaptive-tuned", "holdback-tuned"]
    assert "every arm of the tie set (adaptive-tuned and holdback-tuned)" in words.trials_sentence(r)
    r.budget_why, r.budget_arms = "choice", ["adaptive-tuned"]
    said = words.trials_sentence(r)
    assert "the choice, adaptive-tuned, was found only in the second half of its search" in said
    assert "a run with 10 of the 20 trials would race: that run would not give this answer" in said
    r.budget_why, r.trials_needed, r.tuning = "start-up", 20, _tuned(trials=10)
    said = words.trials_sentence(r)
    assert "every search ran 10 trials, all within the sampler's random start-up" in said
    assert "the tuned arm of the tie set (adaptive-tuned) is a chance draw" in said
    assert "--trials 20 would tell whether the answer holds. Not exported." in said
    assert words.not_exported(r).endswith("rerun with --trials 20")
    r.trials_needed, r.budget_arms = None, []
    assert words.trials_sentence(r) is None


def test_an_answer_that_hangs_on_the_budget_grows_the_searches_to_the_longer_runs_answer(tiny, tmp_path):
    """5 trials are within the random start-up and tuned arms tie: decide doubles the searches to the 20 trials
    that would tell (within the default ceiling, 4 x [decision] trials), and its answer is, number for number, a
    run asked for 20 trials outright."""
    from simlab.records import load

    path = tmp_path / "settles.toml"
    path.write_text(TINY + SETTLES)
    grown, direct = tmp_path / "grown", tmp_path / "direct"
    for trials, out in (("5", grown), ("20", direct)):
        simlab("decide", path, "--trials", trials, "--replications", "4", "--out", out, "--quiet", "--workers", "1")
    g, d = load(grown / "result.json", "decide"), load(direct / "result.json", "decide")
    assert [(x.trials, x.why) for x in g.budget_steps] == [(5, "start-up"), (20, "")]
    assert [(x.trials, x.why) for x in d.budget_steps] == [(20, "")]
    assert g.budget_steps[-1] == d.budget_steps[0] and g.max_trials == d.max_trials == 80
    assert g.exit_code == d.exit_code == 0 and g.tuning.trials_per_family == 20
    for which in ("selection", "confirmation"):
        assert [(a.label, a.options, a.p95_ms, a.throughput_per_min) for a in getattr(g, which)] == \
               [(a.label, a.options, a.p95_ms, a.throughput_per_min) for a in getattr(d, which)]
    assert json.loads((grown / "best-options.json").read_text()) == json.loads((direct / "best-options.json").read_text())
    for folder in ("tune", "tune-holdback", "tune-aimd", "tune-gradient2"):  # each study grew to 20 trials
        assert json.loads((grown / folder / "result.json").read_text())["record"]["trials"] == 20
    said = " ".join(words_of(g))
    assert "At 5 trials per family the answer hung on the tuning budget (every search within the sampler's " \
           "random start-up), so decide doubled every search (5 → 20 trials); at 20 it does not" in said
    assert "## Tuning budgets" in (grown / "report.md").read_text()
    assert "## Tuning budgets" not in (direct / "report.md").read_text()
    # with no room to grow (--max-trials 5), the 5-trial answer is held back and names the 20 that would tell
    held = tmp_path / "held"
    proc = simlab("decide", path, "--trials", "5", "--max-trials", "5", "--replications", "4", "--out", held,
                  "--quiet", check=False)
    h = load(held / "result.json", "decide")
    assert proc.returncode == 3 and "rerun with --trials 20" in proc.stderr
    assert [x.trials for x in h.budget_steps] == [5] and h.trials_needed == 20
    assert "were not grown past 5 trials per family: the 20 that would tell is more than --max-trials (5)" in \
           " ".join(words_of(h))


def words_of(record) -> list[str]:
    from simlab.reporting import words

    return words.decide_sentences(record)


def test_the_searches_grow_only_while_the_answer_hangs_on_the_budget_and_within_the_ceiling():
    from types import SimpleNamespace

    from simlab.decision.run import max_trials_of, trials_to_tell
    from simlab.errors import InputError

    rule = SimpleNamespace(max_trials=None, trials=20)
    assert max_trials_of(rule, 20, None) == 80 and max_trials_of(rule, 20, 20) == 20
    # a smaller --trials starts smaller but does not lower the ceiling; a larger one raises it
    assert max_trials_of(rule, 10, None) == 80 and max_trials_of(rule, 40, None) == 160
    assert max_trials_of(SimpleNamespace(max_trials=50, trials=20), 20, None) == 50
    assert max_trials_of(SimpleNamespace(max_trials=10, trials=10), 20, None) == 20  # never below the trials asked
    with pytest.raises(InputError, match="max_trials"):
        max_trials_of(rule, 20, 10)
    # the chain 20 -> 40 -> 80 under the default ceiling; start-up jumps to twice the start-up
    assert trials_to_tell(20, "tie-set") == 40 and trials_to_tell(40, "choice") == 80
    assert trials_to_tell(5, "start-up") == 20 and trials_to_tell(20, "") is None


def test_the_answer_says_how_far_the_searches_grew_and_where_the_ceiling_stopped_them():
    from types import SimpleNamespace

    from simlab.records import BudgetStep
    from simlab.reporting import words

    step = lambda n, why: BudgetStep(n, "gradient2-tuned", ["gradient2-tuned"], True, why)  # noqa: E731
    r = SimpleNamespace(budget_steps=[step(20, "tie-set"), step(40, "choice"), step(80, "choice")], max_trials=80,
                        trials_needed=160)
    said = words.steps_sentence(r)
    assert said.startswith("At 20 trials per family the answer hung on the tuning budget (a tie set of picks the "
                           "search with half its trials would not race)")
    assert "(20 → 40 → 80 trials), up to --max-trials (80)." in said and "it does not" not in said
    r.budget_steps = [step(20, "tie-set"), step(40, "")]
    assert words.steps_sentence(r).endswith("(20 → 40 trials); at 40 it does not, and this is that budget's answer.")
    r.budget_steps = [step(20, "")]  # the first budget settled it: nothing to say
    assert words.steps_sentence(r) is None
    r.budget_steps, r.max_trials = [], None  # a record saved before the field, or --trials 0
    assert words.steps_sentence(r) is None


def test_decide_knows_what_a_run_with_half_the_trials_races(tiny, tmp_path):
    """The search's record holds the arms a run with half the trials would race: exactly that run's picks."""
    from simlab.tuning.run import run_tune

    scenario = load_scenario(tiny)
    base = scenario.options()
    short = run_tune(scenario, base, tmp_path / "short", trials=4, validate=False, progress=False)
    long = run_tune(scenario, base, tmp_path / "long", trials=8, validate=False, progress=False)
    assert long.half_picks == short.candidates


def test_a_warning_every_familys_search_raises_reaches_the_user_once(tmp_path):
    """Every family's search reads the same search runs: their capacity warning (batch-absent P95 above the SLO)
    reaches the user once, whatever the number of families."""
    from simlab.decision.run import tune_families

    scenario = load_scenario(ROOT / "docs" / "examples" / "tiny.toml")
    scenario = scenario.model_copy(update={"slo_p95_ms": 1.0})  # above it with batch work absent
    said = []
    tuned, summary, _ = tune_families(scenario, scenario.options(), tmp_path, ["adaptive", "holdback", "aimd"], 2, 1,
                                      False, said.append)
    capacity = [m for m in said if m.startswith("capacity:")]
    assert len(capacity) == 1 and "no scheduler can meet this SLO" in capacity[0], said
    assert [f.family for f in summary.families] == ["adaptive", "holdback", "aimd"]
    assert all(f.trials == 2 for f in summary.families)
    # so small an SLO collapses the adaptive threshold's default range [SLO / 20 or 10 ms, 5 SLO] to 10 ms: the
    # default 300 ms lies outside what is searched, said once in the range searched
    outside = [m for m in said if "outside the searched range" in m]
    assert len(outside) == 1 and "interactiveP95LatencyMs = 300 lies outside the searched range [10, 10]" in outside[0]


def test_families_tuned_together_on_a_pool_hold_what_each_holds_tuned_alone(tmp_path):
    """decide runs the families' searches at once on one pool (their batches interleaved as the workers free up):
    each study ends with the same trials, parameters and values as the family's search alone in one process. Past
    the sampler's random start-up (simlab.tuning.STARTUP_TRIALS), so proposals read the trials stored before them."""
    import optuna

    from simlab.tuning.run import run_tune, run_tune_families
    from simlab.tuning.study import open_storage

    scenario = load_scenario(ROOT / "docs" / "examples" / "tiny.toml")
    families = ["adaptive", "holdback", "gradient2"]
    together = run_tune_families(scenario, scenario.options(), {f: tmp_path / "together" / f for f in families},
                                 trials=14, workers=2, progress=False, search_runs=tmp_path / "together" / "search")

    def trials(folder):
        study = optuna.load_study(study_name=scenario.name, storage=open_storage(f"sqlite:///{folder / 'study.db'}"))
        return [(t.number, t.state.name, t.params, t.values, t.user_attrs["objective_per_seed"])
                for t in study.get_trials()]

    for family in families:
        alone = run_tune(scenario, scenario.options(), tmp_path / "alone" / family, trials=14, workers=1,
                         progress=False, validate=False, family=family)
        assert together[family].candidates == alone.candidates, family
        held, solo = trials(tmp_path / "together" / family), trials(tmp_path / "alone" / family)
        assert len(held) == 14 and held == solo, family


def test_too_few_requests_for_a_p95_is_said_once_for_the_search_and_once_for_the_selection(tmp_path):
    """Every family's search reads the same reference runs: their few-requests warning is said once; the selection
    runs, on other traffic, are judged on their own counts."""
    from simlab.decision.run import tune_families

    text = (ROOT / "docs" / "examples" / "tiny.toml").read_text().replace("duration_ms = 8_000", "duration_ms = 1_000")
    (tmp_path / "short.toml").write_text(text)
    scenario = load_scenario(tmp_path / "short.toml")
    said = []
    tune_families(scenario, scenario.options(), tmp_path / "tune", ["adaptive", "holdback", "aimd"], 2, 1, False,
                  said.append)
    few = [m for m in said if m.startswith("few requests:")]
    assert len(few) == 1 and "the median search run completes" in few[0], said
    proc = simlab("decide", tmp_path / "short.toml", "--trials", "0", "--replications", "2", "--workers", "1",
                  "--out", tmp_path / "decide", "--quiet")
    assert proc.stderr.count("few requests:") == 1 and "the median selection run completes" in proc.stderr


def test_the_answer_says_why_the_searches_stopped_growing():
    """decide stops doubling the searches at --max-trials, or where the answer is not settled on the selection
    seeds (seeds come first): the sentence names the reason that held, never the ceiling when it was not reached."""
    from types import SimpleNamespace

    from simlab.records import BudgetStep
    from simlab.reporting.words import steps_sentence

    def rec(steps, needed, ceiling):
        return SimpleNamespace(budget_steps=[BudgetStep(t, "x", ["x"], settled, why) for t, settled, why in steps],
                               trials_needed=needed, max_trials=ceiling)

    unsettled = "the answer is not settled on the selection seeds, and an unsettled answer asks for seeds before trials"
    assert steps_sentence(rec([(10, False, "start-up")], 20, 80)) == (
        f"The searches were not grown past 10 trials per family: {unsettled}.")
    assert steps_sentence(rec([(10, True, "start-up")], 20, 10)) == (
        "The searches were not grown past 10 trials per family: the 20 that would tell is more than --max-trials (10).")
    assert steps_sentence(rec([(10, True, "tie-set"), (20, False, "tie-set")], 40, 80)).endswith(
        f"(10 → 20 trials); at 20 {unsettled}.")
    assert steps_sentence(rec([(10, True, "tie-set"), (20, True, "tie-set")], 40, 20)).endswith(
        "(10 → 20 trials), up to --max-trials (20).")
    assert steps_sentence(rec([(10, True, "tie-set"), (20, True, "")], None, 80)).endswith(
        "(10 → 20 trials); at 20 it does not, and this is that budget's answer.")
