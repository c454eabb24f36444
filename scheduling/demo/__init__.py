"""The demo: its data (``*.yaml``, read by ``manage.py demo``) and its traffic generator."""
