"""What may go into a job row and what comes out of an attempt.

At enqueue: arguments as JSON text that survives the round trip unchanged and that jsonb
can store. In the worker: the stored arguments checked against the handler's signature,
the return value checked for what jsonb can hold, and the error record of a failed
attempt. Every refusal names what is wrong, so it reads well in an error or a log line.
"""

from __future__ import annotations

import inspect
import json
import traceback
from collections.abc import Iterable
from typing import Any

from .exceptions import BadPayload, BadReturnValue, InvalidPayload

TRACEBACK_LIMIT = 16_000
MESSAGE_LIMIT = 2_000


def unstorable_text(text: str) -> str:
    """Why jsonb cannot store this string, or "" if it can."""
    if "\x00" in text:
        return "NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "lone surrogate"
    return ""


def dump_payload(name: str, value: Any) -> str:
    """``value`` (the args list or the kwargs dict) as compact JSON, or InvalidPayload."""
    if not value:
        # No arguments: the common case of bulk fan-out by id is a short payload anyway.
        return "{}" if isinstance(value, dict) else "[]"
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{name} must be JSON-serializable: {exc}") from exc
    # json.dumps escapes NUL as \u0000 and a surrogate as \udc80 and the like: only then
    # can a string be one PostgreSQL refuses (astral characters, escaped as surrogate
    # pairs, are fine).
    _check_payload(name, value, check_text="\\u0000" in text or "\\ud" in text)
    return text


def _check_payload(name: str, value: list[Any] | dict[str, Any], *, check_text: bool) -> None:
    """Refuse what json.dumps accepts but would hand the handler changed: object keys that
    are not strings ({1: "a"} comes back as {"1": "a"}); and, with ``check_text``, strings
    jsonb cannot store (a NUL character, a lone surrogate)."""
    stack: list[tuple[list[Any] | tuple[Any, ...] | dict[Any, Any], str]] = [(value, name)]
    while stack:
        container, where = stack.pop()
        is_object = isinstance(container, dict)
        pairs: Iterable[tuple[Any, Any]] = (
            container.items() if isinstance(container, dict) else enumerate(container)
        )
        for key, item in pairs:
            if is_object and not isinstance(key, str):
                raise InvalidPayload(f"{name} must be JSON: the key {key!r} at {where} is not a string")
            if isinstance(item, dict | list | tuple):
                stack.append((item, f"{where}[{key!r}]"))
            elif check_text and isinstance(item, str) and (problem := unstorable_text(item)):
                raise InvalidPayload(
                    f"{name} must be JSON that PostgreSQL can store: {problem} in {where}[{key!r}]"
                )
            if check_text and is_object and (problem := unstorable_text(key)):
                raise InvalidPayload(
                    f"{name} must be JSON that PostgreSQL can store: {problem} in a key at {where}"
                )


def decode_payload(
    args: Any, kwargs: Any, signature: inspect.Signature, takes_context: bool
) -> tuple[list[Any], dict[str, Any]]:
    try:
        if isinstance(args, str):
            args = json.loads(args)
        if isinstance(kwargs, str):
            kwargs = json.loads(kwargs)
    except ValueError as exc:
        raise BadPayload(f"payload is not JSON: {exc}") from exc
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise BadPayload(
            f"payload must be a list of args and a dict of kwargs, got "
            f"{type(args).__name__} and {type(kwargs).__name__}"
        )
    try:
        if takes_context:
            signature.bind(None, *args, **kwargs)
        else:
            signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise BadPayload(f"payload does not fit the task's signature: {exc}") from exc
    return args, kwargs


def check_result(value: Any) -> Any:
    if value is None or type(value) in (int, bool):
        return value
    if type(value) is not str:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise BadReturnValue(f"return value is not JSON: {exc}") from exc
    problem = _unstorable_value(value)
    if problem:
        # It would fail the fenced write of the whole batch, not just this job.
        raise BadReturnValue(f"return value cannot be stored as jsonb: {problem}")
    return value


def _unstorable_value(value: Any) -> str:
    """Why jsonb cannot hold this JSON value ("" if it can): a string or key at any depth
    that unstorable_text refuses."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if problem := unstorable_text(item):
                return f"a string contains a {problem}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return ""


def error_record(exc: BaseException) -> dict[str, Any]:
    """What the job's history keeps of a failed attempt. Never raises: an exception whose
    ``__str__`` raises (or a traceback that cannot be formatted) is still recorded."""
    kind = type(exc)
    try:
        message = str(exc)
    except BaseException as failure:  # noqa: BLE001 - the record must be written whatever str() does
        message = f"<{kind.__name__} whose str() raised {type(failure).__name__}>"
    try:
        trace = "".join(traceback.format_exception(exc))
    except BaseException as failure:  # noqa: BLE001
        trace = f"<traceback could not be formatted: {type(failure).__name__}>"
    return {
        "exception": f"{kind.__module__}.{kind.__qualname__}",
        "message": message[:MESSAGE_LIMIT] or kind.__name__,
        "traceback": trace[-TRACEBACK_LIMIT:],
    }
