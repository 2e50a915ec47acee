"""WSGI entry point for gunicorn."""

import os

from django.core.wsgi import get_wsgi_application

from project import startup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
startup.setup()  # a bad setting: one line and exit status 2, not a traceback
application = get_wsgi_application()
