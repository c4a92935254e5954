"""The operations console, in one room.

``admin`` registers the job, worker, fire-record and limit pages (jobs/admin.py adds the
schedule and workflow pages of their subsystems); ``changelist`` is the job list at a
million rows (filters, search, counts without COUNT); ``detail`` a job's own page;
``actions`` the permissioned, logged actions, each through jobs.store; ``history`` a job's
runs across replays; ``dashboard`` the live page; ``limits`` the limits' page; ``moments``
how every page writes a time; ``replica`` the routing of the console's reads to a replica;
``views`` the status API. Importing the package loads none of them: jobs/admin.py (Django's
autodiscovery) imports ``admin``.
"""
