import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kueueweb.settings")
application = get_wsgi_application()

# As in kueueweb.asgi: keep what lives as long as the process out of full collections.
gc.freeze()
