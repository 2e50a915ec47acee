"""Small project-level pages: ``/`` leads to the console, ``/favicon.ico`` to its icon."""

from django.shortcuts import redirect
from django.templatetags.static import static

# Pages link their icon from the static files (admin/base_site.html, ninja/favicons.html);
# /favicon.ico is for what asks the root anyway (browsers on a JSON page, feed readers).
FAVICON = "console/favicon.ico"


def home(request):
    """Send visitors to the dashboard (the admin asks them to log in first)."""
    return redirect("admin:dashboard")


def favicon(request):
    """Send a request for /favicon.ico to the static icon (served by WhiteNoise).

    Not a permanent redirect: browsers keep those for good, and a static URL may change
    (a hashed name, another STATIC_URL).
    """
    return redirect(static(FAVICON))
