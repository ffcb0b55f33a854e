"""Scheduling policies: clock-free objects that decide which queued tasks start now."""

from simlab.policies.adaptive import Adaptive, js_round
from simlab.policies.base import BATCH, INTERACTIVE, KINDS, Clock, Observation, Observe, Policy, Task
from simlab.policies.evict import Evicting
from simlab.policies.gates import Aimd, Gradient2, Holdback
from simlab.policies.options import (
    ARTICLE_DEFAULTS,
    GATEWAY_POLICIES,
    POLICY_NAMES,
    SchedulerOptions,
    load_options,
    options_from_dict,
)
from simlab.policies.simple import Fifo, Priority, Static, Unscheduled

POLICIES = {cls.name: cls for cls in (Unscheduled, Fifo, Priority, Static, Adaptive, Holdback, Aimd, Gradient2)}


def make_policy(options: SchedulerOptions, clock: Clock, observe: Observe | None = None) -> Policy:
    """A fresh policy object for `options.policy`, reading time from `clock` (ms) and, if it reads the backend at
    all, the backend from `observe` (an `Observation` now). With `evict` (where it applies), wrapped in `Evicting`."""
    policy = POLICIES[options.policy](options, clock, observe)
    if options.evicts:
        policy = Evicting(policy, options)
    return policy


__all__ = [
    "ARTICLE_DEFAULTS",
    "GATEWAY_POLICIES",
    "Aimd",
    "Evicting",
    "Gradient2",
    "Holdback",
    "Observation",
    "Observe",
    "BATCH",
    "INTERACTIVE",
    "KINDS",
    "POLICIES",
    "POLICY_NAMES",
    "Adaptive",
    "Fifo",
    "Policy",
    "Priority",
    "SchedulerOptions",
    "Static",
    "Task",
    "Unscheduled",
    "js_round",
    "load_options",
    "make_policy",
    "options_from_dict",
]
