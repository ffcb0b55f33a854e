"""simlab.runtime.Scheduler refuses, when it is built, options under which a submit of some class could wait
forever (a library: a ValueError naming the option); a simulation only warns and counts the stranded tasks."""

from __future__ import annotations

import pytest

from simlab.policies import options_from_dict
from simlab.runtime.scheduler import Scheduler

ADAPTIVE = {"policy": "adaptive", "maxConcurrency": 4, "batchMaxConcurrency": 2, "batchMinConcurrency": 1,
            "interactiveRpsThreshold": 4, "interactiveP95LatencyMs": 150}


@pytest.mark.parametrize("options, option", [
    ({"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 0}, "batchMaxConcurrency = 0"),
    ({**ADAPTIVE, "batchMaxConcurrency": 0, "batchMinConcurrency": 0, "recheckOnExpiry": True},
     "batchMaxConcurrency = 0"),
    ({**ADAPTIVE, "batchMinConcurrency": 0}, "batchMinConcurrency = 0 without recheckOnExpiry"),
])
def test_options_that_would_wait_forever_are_refused(options, option):
    with pytest.raises(ValueError) as info:
        Scheduler(options_from_dict(options))
    assert str(info.value).startswith(f"simlab.runtime.Scheduler refuses these options: {option}")
    assert "forever" in str(info.value)


@pytest.mark.parametrize("options", [
    {"policy": "unscheduled"},
    {"policy": "fifo", "maxConcurrency": 1},
    {"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 1},
    ADAPTIVE,
    {**ADAPTIVE, "batchMinConcurrency": 0, "recheckOnExpiry": True},  # the cap rises again as samples expire
])
def test_options_under_which_every_submit_starts_are_accepted(options):
    assert Scheduler(options_from_dict(options)).options.policy == options["policy"]
