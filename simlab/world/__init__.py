"""The simulated world: backends that serve requests, workloads that make them, and the SimPy engine."""
