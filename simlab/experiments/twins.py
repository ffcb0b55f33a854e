"""Arms that are one simulation: the key a plan or a search shares runs by.

Two arms on the same unit run the same simulation when their options are equal, or when both run as the same
static cap (simlab/policies/equivalence.py: a gradient2 gate whose limit cannot move, a holdback gate whose
saturation can only be 0 on this backend). One of them is simulated; the other's metrics are a copy under its own
label. A bound's variant (batch absent, batch alone) is another world: never shared across variants; nor are runs
behind several gateway instances, where each instance's policy sees only its share of the tasks.
"""

from __future__ import annotations

from simlab.policies import SchedulerOptions
from simlab.policies.equivalence import static_key
from simlab.world.backends import never_queues, reports_kv


def run_key(options: SchedulerOptions, world, variant: str = "") -> tuple:
    """What decides a run of `options` on `world` (a scenario, its condition applied): equal keys, equal runs."""
    gateway = world.gateway
    if not variant and (gateway is None or gateway.plain):  # the proofs are of one policy seeing every task
        key = static_key(options, not never_queues(world, options.max_concurrency), reports_kv(world))
        if key is not None:
            return ("static", *key)
    return ("options", variant, repr(sorted(options.to_json_dict().items())))


def as_twin(metrics: dict, label: str) -> dict:
    """A shared run's metrics under another arm's label."""
    return dict(metrics, policy=label)
