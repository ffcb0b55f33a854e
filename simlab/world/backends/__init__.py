"""Backends by name. Each is a model of something real that serves LLM requests."""

from simlab.world.backends.api import ApiBackend
from simlab.world.backends.base import Backend
from simlab.world.backends.continuous_batching import ContinuousBatchingBackend
from simlab.world.backends.delay import DelayBackend
from simlab.world.backends.slots import SlotsBackend

BACKENDS = {cls.name: cls for cls in (DelayBackend, SlotsBackend, ContinuousBatchingBackend, ApiBackend)}


def make_backend(config, env, done, rng, scenario=None) -> Backend:
    cls = BACKENDS[config.kind]
    if getattr(config, "engine_scheduling", False):  # a KV cache or engine priority: vLLM V1's scheduler
        from simlab.world.backends.kv_batching import KvBatchingBackend as cls
    backend = cls(env, done, config, rng)
    if scenario is not None and hasattr(backend, "load_profile"):
        backend.load_profile(scenario)
    return backend


def never_queues(scenario, max_in_flight: int | None) -> bool:
    """True when no task dispatched to this scenario's backend can wait inside it, with at most `max_in_flight`
    dispatched at once (one gateway's total cap): unlimited capacity (`delay`), or GPU slots at least that many.
    False wherever it might (other backends, several gateway instances, a cap above the slots)."""
    gateway, backend = scenario.gateway, scenario.backend
    if (gateway is not None and not gateway.plain) or max_in_flight is None:
        return False
    if backend.kind == "delay":
        return True
    return backend.kind == "slots" and backend.slots >= max_in_flight


def reports_kv(scenario) -> bool:
    """Whether the backend reports KV-cache use to the policies (every kind but `delay` and `slots` may)."""
    return scenario.backend.kind not in ("delay", "slots")


__all__ = ["BACKENDS", "Backend", "make_backend", "never_queues", "reports_kv"]
