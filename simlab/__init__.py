"""simlab: a discrete-event lab for scheduling interactive and batch LLM traffic.

Time is in milliseconds everywhere.
"""

__version__ = "0.1.0"
