"""A workload after admission: its conditions, lifecycle timers (PodsReady, back-off, maximum execution time), elastic slices (Kueue's workloadslicing) and the actions users take on it."""
