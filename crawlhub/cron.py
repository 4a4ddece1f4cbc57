"""Periodic jobs, run by `manage.py rqcron crawlhub.cron` (started by `up`)."""
