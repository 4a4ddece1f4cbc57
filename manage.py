#!/usr/bin/env python
"""crawlhub's command-line entry point."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlhub.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads crawlhub/settings.py, which checks each value
    except ImproperlyConfigured as exc:
        # The message names the variable and what it must be: a traceback would only bury it.
        sys.exit(f"crawlhub cannot start: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
