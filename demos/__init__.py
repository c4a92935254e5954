"""Runnable workflow demos: the video pipeline and the payment approval (jobs.workflows)."""
