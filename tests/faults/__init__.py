"""Fault tests: reconcilers, databases, brokers and workers fail or stall in the middle of the
work, and the invariants (no quota held twice, no workload lost) still hold afterwards."""
