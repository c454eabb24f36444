"""``manage.py bench``, ``simulate`` and ``loadtest``."""
