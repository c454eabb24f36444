import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kueueweb.settings")
application = get_wsgi_application()

from kueueweb import collector  # noqa: E402

collector.tune()
