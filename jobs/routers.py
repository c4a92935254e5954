"""The database router: the job tables are read from the replica inside the console's read
views (jobs/console/replica.py); every write, every claim, the worker, sessions and users use the
primary. Other routers (a database per queue family, say) decide the rest: this one has no
opinion outside the replica."""

from __future__ import annotations

from typing import Any

from .console import replica


class ReplicaRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        # By the app's module, not its label: a project may install the engine relabelled.
        if model._meta.app_config.name == "jobs" and replica.reading_from_replica():
            return replica.REPLICA
        return None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        # Django writes a row back where it was read from: not a row from the replica.
        instance = hints.get("instance")
        if instance is not None and instance._state.db == replica.REPLICA:
            return "default"
        return None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # The replica is a copy of the primary: rows read from either relate.
        if {obj1._state.db, obj2._state.db} <= {"default", replica.REPLICA}:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        # The replica replays the primary's migrations; it cannot run its own.
        return db != replica.REPLICA
