"""simlab.runtime: the policies of the lab, driving real asyncio work (see scheduler.py)."""

from simlab.runtime.scheduler import Scheduler, Snapshot

__all__ = ["Scheduler", "Snapshot"]
