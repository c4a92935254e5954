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
from collections.abc import Iterable, Sequence
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from .exceptions import BadReturnValue, InvalidPayload

TRACEBACK_LIMIT = 16_000
MESSAGE_LIMIT = 2_000


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# Compact, and no NaN or Infinity (jsonb refuses them). The C encoder made once: the
# JSONEncoder's encode() makes one on every call, three quarters of the cost of dumping a
# short payload. Without the circular-reference markers, which one encoder shared by threads
# cannot keep: a circular payload ends in RecursionError instead, as a deeply nested one does.
def _c_encoder() -> Any:
    if c_make_encoder is None:  # pragma: no cover - a Python without the json accelerator
        return None
    try:
        return c_make_encoder(None, _refuse, encode_basestring_ascii, None, ":", ",", False, False, False)
    except TypeError:  # pragma: no cover - an accelerator that takes other arguments
        return None


_C_ENCODE: Any = _c_encoder()
_PY_ENCODE = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


def _encode(value: Any) -> str:
    if _C_ENCODE is None:  # pragma: no cover
        return _PY_ENCODE(value)
    return "".join(_C_ENCODE(value, 0))


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
        text = _encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{name} must be JSON-serializable: {exc}") from exc
    except RecursionError as exc:
        raise InvalidPayload(f"{name} must be JSON-serializable: nested too deeply, or circular") from exc
    # json.dumps escapes NUL as \u0000 and a surrogate as \udc80 and the like: only then
    # can a string be one PostgreSQL refuses (astral characters, escaped as surrogate
    # pairs, are fine).
    escaped = "\\u0000" in text or "\\ud" in text
    if escaped or not is_flat(value):
        _check_payload(name, value, check_text=escaped)
    return text


# Values JSON gives back exactly as they went in (their exact types: not a subclass, whose
# own type would be lost).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def is_flat(value: Sequence[Any] | dict[str, Any]) -> bool:
    """Whether args or kwargs hold only scalars JSON keeps as they are (and string keys):
    the commonest payloads (ids, names, numbers), which need no walk."""
    if isinstance(value, dict):
        return all(type(key) is str for key in value) and all(
            type(item) in _SCALARS for item in value.values()
        )
    return all(type(item) in _SCALARS for item in value)


def stored_value(value: Any, text: str) -> Any:
    """What a handler gets back for args or kwargs ``value`` (stored as ``text``, its
    dump_payload): for a flat list, tuple or dict, a list or dict of the same items; else
    the stored JSON, decoded."""
    if text == "[]":
        return []
    if text == "{}":
        return {}
    kind = type(value)
    if kind in (list, tuple) and is_flat(value):
        return list(value)
    if kind is dict and is_flat(value):
        return dict(value)
    return load_payload(text)


def load_payload(text: str) -> Any:
    """The args list or kwargs dict of stored JSON text (dump_payload's inverse): decoded
    in C, and not at all for the commonest payloads, the empty ones."""
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)


class ArgumentCheck:
    """Whether arguments fit a task function's signature, remembered per shape (how many
    positional arguments, which keywords), so that checking every job costs a lookup."""

    def __init__(self, func: Any, *, takes_context: bool) -> None:
        self.signature = inspect.signature(func)
        self.takes_context = takes_context
        self.fits: dict[tuple[int, tuple[str, ...]], str] = {}

    def problem(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """ "" if they fit, else why not (Python's own words)."""
        shape = (len(args), tuple(kwargs))
        problem = self.fits.get(shape)
        if problem is None:
            try:
                if self.takes_context:
                    self.signature.bind(None, *args, **kwargs)
                else:
                    self.signature.bind(*args, **kwargs)
                problem = ""
            except TypeError as exc:
                problem = f"payload does not fit the task's signature: {exc}"
            if len(self.fits) < 64:
                self.fits[shape] = problem
        return problem


def _check_payload(name: str, value: list[Any] | dict[str, Any], *, check_text: bool) -> None:
    """Refuse what json.dumps accepts but would hand the handler changed: object keys that
    are not strings ({1: "a"} comes back as {"1": "a"}), tuples (they come back as lists);
    and, with ``check_text``, strings jsonb cannot store (a NUL character, a lone
    surrogate)."""
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
            if isinstance(item, tuple):
                raise InvalidPayload(
                    f"{name} must be JSON: {where}[{key!r}] is a tuple, which the handler would get "
                    f"back as a list; pass a list"
                )
            if isinstance(item, dict | list):
                stack.append((item, f"{where}[{key!r}]"))
            elif check_text and isinstance(item, str) and (problem := unstorable_text(item)):
                raise InvalidPayload(
                    f"{name} must be JSON that PostgreSQL can store: {problem} in {where}[{key!r}]"
                )
            if check_text and is_object and (problem := unstorable_text(key)):
                raise InvalidPayload(
                    f"{name} must be JSON that PostgreSQL can store: {problem} in a key at {where}"
                )


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
