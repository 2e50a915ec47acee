"""Small project-level pages: ``/`` leads to the console."""

from django.shortcuts import redirect


def home(request):
    """Send visitors to the dashboard (the admin asks them to log in first)."""
    return redirect("admin:dashboard")
