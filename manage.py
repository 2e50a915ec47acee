#!/usr/bin/env python
"""Run Conveyor's administrative commands."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.management import execute_from_command_line

    from project import startup

    startup.setup()  # a bad setting: one line and exit status 2, not a traceback

    with startup.database_reachable():  # nor a database it cannot connect to
        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
