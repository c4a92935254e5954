"""What goes into and comes out of one attempt: the stored arguments checked against the
handler's signature, the return value checked for what jsonb can hold, and the error
record of a failed attempt."""

from __future__ import annotations

import inspect
import json
import traceback
from typing import Any

from ..exceptions import BadPayload, BadReturnValue

TRACEBACK_LIMIT = 16_000
MESSAGE_LIMIT = 2_000


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
    problem = _unstorable_text(value)
    if problem:
        # It would fail the fenced write of the whole batch, not just this job.
        raise BadReturnValue(f"return value cannot be stored as jsonb: {problem}")
    return value


def _unstorable_text(value: Any) -> str:
    """Why jsonb cannot hold this JSON value ("" if it can): text with U+0000 in it or a
    lone surrogate, in a string or a key at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a string contains U+0000"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "a string contains a lone surrogate"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return ""


def error_record(exc: BaseException) -> dict[str, Any]:
    kind = type(exc)
    return {
        "exception": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc)[:MESSAGE_LIMIT] or kind.__name__,
        "traceback": "".join(traceback.format_exception(exc))[-TRACEBACK_LIMIT:],
    }
