"""simlab: a discrete-event lab for scheduling interactive and batch LLM traffic.

Time is in milliseconds everywhere. The Python API (simlab/api.py) loads on first use, so `import simlab` and
`import simlab.runtime` stay light (no numpy, pandas, SimPy or matplotlib at import):

    simlab.ab(scenario, ...)      -> AbRecord        simlab.decide(scenario, ...) -> DecideRecord
    simlab.tune(scenario, ...)    -> TuneRecord      simlab.load(folder)          -> the record a command wrote
"""

from simlab.version import __version__

__all__ = ["__version__", "SimlabWarning", "ab", "decide", "load", "tune"]

_API = ("SimlabWarning", "ab", "decide", "load", "tune")


def __getattr__(name: str):
    if name in _API:
        from simlab import api

        return getattr(api, name)
    raise AttributeError(f"module 'simlab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
