"""What the scheduler reports: the Prometheus metrics and the usage history samples of the overview."""
