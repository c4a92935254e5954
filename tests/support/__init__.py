"""Helpers shared by several tiers of the suite (unit, integration, process, e2e, ...).

accounts     users in each state of signup, the email jobs run in-process, a counting hasher
docs         the documentation's samples, their marks, and the manage.py lines in its pages
factories    job rows whose columns agree with their state; run_due (the worker's attempt code)
mail         the SMTP server on loopback (a pytest plugin: smtp_sink, smtp_settings), reading mail
push/        a fake APNs and FCM, their servers and fixtures
schedules    schedules that fire every second, and the check that each slot fired once
servers      private PostgreSQL clusters, PgBouncer, an OTLP receiver
workers      real runworker processes: start, watch, signal, wait
"""
