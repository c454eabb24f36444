"""The cache: builds the engine's immutable specs and snapshots from the database rows, as Kueue's cache does; usage is derived from the workloads holding quota, never stored."""
