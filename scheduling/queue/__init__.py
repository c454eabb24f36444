"""The queues as users see them: pending order, positions in a queue and why a workload is pending (Kueue's visibility API)."""
