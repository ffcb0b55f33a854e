"""The A/B figures: every figure written as a readable PNG and an SVG carrying its title and axis labels,
identical on a rerun, and skipped (not crashed) when its input is missing."""

from __future__ import annotations

import hashlib
import shutil

import matplotlib.image as mpimg
import pytest

from simlab.experiments.ab import run_ab, store
from simlab.reporting.figures.ab import FIGURES, ab_figures, rolling_p95
from simlab.scenario import scenario_from_dict

POLICIES = ["unscheduled", "priority", "static", "adaptive"]
SEEDS = [1, 2]


def small_scenario(batch: bool = True):
    workload = [
        {
            "name": "chat",
            "class": "interactive",
            "arrivals": {"process": "closed-loop", "users": 3, "start_ms": 200, "think": {"dist": "exponential", "mean": 10}},
            "service": {"dist": "lognormal", "median": 20, "p95": 60},
        }
    ]
    if batch:
        workload.append(
            {
                "name": "backfill",
                "class": "batch",
                "arrivals": {"process": "burst", "count": 12, "at_ms": [0, 1500, 3000]},
                "service": {"dist": "lognormal", "median": 200, "p95": 400},
            }
        )
    return scenario_from_dict(
        {
            "name": "tiny-plots" if batch else "tiny-no-batch",
            "duration_ms": 5_000,
            "slo_p95_ms": 150,
            "backend": {"kind": "slots", "slots": 6},
            "scheduler": {"maxConcurrency": 6, "batchMaxConcurrency": 4, "batchMinConcurrency": 1,
                          "interactiveRpsThreshold": 20, "interactiveP95LatencyMs": 150, "windowMs": 2_000},
            "workload": workload,
        }
    )


@pytest.fixture(scope="module")
def ab_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("ab")
    scenario = small_scenario()
    store(run_ab(scenario, scenario.options(), POLICIES, SEEDS, out, workers=1, progress=False), out)
    return out, ab_figures(out, strict=True)  # rendering is the slow part: once for the tests that only read


def svg_text(out, name):
    return (out / "figures" / f"{name}.svg").read_text(encoding="utf-8")


def test_every_figure_is_written_as_png_and_svg(ab_dir):
    ab_dir, figures = ab_dir
    assert figures == [f"figures/{n}.png" for n in FIGURES]
    for rel in figures:
        png = ab_dir / rel
        img = mpimg.imread(png)
        h, w = img.shape[:2]
        assert img.ndim == 3 and img.shape[2] in (3, 4)
        assert 800 <= w <= 4000 and 600 <= h <= 4000, (rel, img.shape)
        assert img[..., :3].std() > 0.05, f"{rel} looks blank"
        svg = png.with_suffix(".svg").read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and "</svg>" in svg


def test_svgs_carry_titles_and_axis_labels(ab_dir):
    ab_dir, _ = ab_dir
    expected = {
        "latency_cdf": ["tiny-plots: interactive latency CDF", "interactive end-to-end latency (ms", "fraction of requests",
                        "SLO 150 ms", "adaptive: P95"],
        "rolling_p95": ["tiny-plots: interactive P95 over a sliding 2 s window", "simulated time (s)",
                        "interactive P95 (ms", "SLO 150 ms"],
        "batch_cap_inflight": ["tiny-plots: batch cap and tasks in flight", "tasks in flight", "simulated time (s)",
                               "batch cap in force", "maxConcurrency = 6", *POLICIES],
        "queues": ["tiny-plots: queue lengths", "tasks waiting", "simulated time (s)", "batch queue (scheduler)", *POLICIES],
        "tradeoff": ["tiny-plots: batch throughput vs interactive P95", "interactive P95 latency (ms",
                     "batch throughput (jobs/min)", "better:", "means over 2 seeds", *POLICIES],
    }
    for name, strings in expected.items():
        svg = svg_text(ab_dir, name)
        for s in strings:
            assert s in svg, f"{name}.svg lacks {s!r}"


def test_rerun_gives_identical_files(ab_dir):
    ab_dir, _ = ab_dir

    def digest():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((ab_dir / "figures").iterdir())}

    first = digest()
    ab_figures(ab_dir, strict=True)
    assert digest() == first
    assert len(first) == 2 * len(FIGURES)


def test_missing_inputs_skip_their_figures(ab_dir, tmp_path):
    out = tmp_path / "ab"
    shutil.copytree(ab_dir[0], out)  # with every figure already drawn: the skipped ones must not linger
    assert len(list((out / "figures").glob("*.png"))) == len(FIGURES)
    for p in out.glob("runs/*/seed-*/series.csv"):
        p.unlink()
    figures = ab_figures(out, strict=True)
    assert figures == ["figures/latency_cdf.png", "figures/rolling_p95.png", "figures/tradeoff.png"]
    for name in ("batch_cap_inflight", "queues"):
        assert not (out / "figures" / f"{name}.png").exists() and not (out / "figures" / f"{name}.svg").exists()
    for p in out.glob("runs/*/seed-*/tasks.csv"):
        p.unlink()
    assert ab_figures(out, strict=True) == ["figures/tradeoff.png"]  # from the record alone
    (out / "result.json").unlink()
    assert ab_figures(out) == []
    assert not list((out / "figures").glob("*.png"))


def test_scenario_without_batch_work_skips_the_tradeoff(tmp_path):
    scenario = small_scenario(batch=False)
    store(run_ab(scenario, scenario.options(), ["priority", "adaptive"], [1], tmp_path, workers=1, progress=False),
          tmp_path)
    figures = ab_figures(tmp_path, strict=True)
    assert "figures/tradeoff.png" not in figures
    # nothing ever queued in this light load either: the queues figure would be empty panels
    assert figures == ["figures/latency_cdf.png", "figures/rolling_p95.png", "figures/batch_cap_inflight.png"]
    for rel in figures:
        assert mpimg.imread(tmp_path / rel).shape[0] > 0


def test_rolling_p95_is_the_p95_of_each_trailing_window():
    import numpy as np

    rng = np.random.default_rng(0)
    end = np.sort(rng.uniform(0, 30_000, 600))
    lat = rng.lognormal(3, 1, 600)
    t, p95 = rolling_p95(end, lat, 5_000, min_periods=3, points=300)
    assert len(t) == len(p95) and t[0] == 0 and t[-1] >= end[-1]
    for k in range(0, len(t), 7):
        window = lat[(end > t[k] - 5_000) & (end <= t[k])]
        if len(window) >= 3:
            assert p95[k] == pytest.approx(np.percentile(window, 95))
        else:
            assert np.isnan(p95[k])
