"""Scheduling policies: clock-free objects that decide which queued tasks start now."""

from simlab.policies.adaptive import Adaptive, js_round
from simlab.policies.base import BATCH, INTERACTIVE, KINDS, Clock, Policy, Task
from simlab.policies.options import (
    ARTICLE_DEFAULTS,
    POLICY_NAMES,
    SchedulerOptions,
    load_options,
    options_from_dict,
)
from simlab.policies.simple import Fifo, Priority, Static, Unscheduled

POLICIES = {cls.name: cls for cls in (Unscheduled, Fifo, Priority, Static, Adaptive)}


def make_policy(options: SchedulerOptions, clock: Clock) -> Policy:
    """A fresh policy object for `options.policy`, reading time from `clock` (ms)."""
    return POLICIES[options.policy](options, clock)


__all__ = [
    "ARTICLE_DEFAULTS",
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
