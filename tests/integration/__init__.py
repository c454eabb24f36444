"""Integration tests: the application as it runs in production, in separate processes — Celery
workers, beat and the ASGI server against the real PostgreSQL and Redis."""
