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


__all__ = ["BACKENDS", "Backend", "make_backend"]
