"""simlab.realcheck: the lab's side of sim-to-real. A streaming client for a server on this machine (loopback only,
every wait and read bounded), the load test, CPU accounting, a stand-in engine for tests, driving a scenario's
arrivals through simlab.runtime to the server, and the comparison with the simulation (validate-real)."""
