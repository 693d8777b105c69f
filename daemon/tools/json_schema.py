"""Input schemas that come from outside the daemon (operator files, upstream MCP servers),
checked by a real JSON Schema validator (2020-12), safely.

A `$ref` must point inside the schema ("#..."): jsonschema would otherwise fetch a remote one
over HTTP, from the daemon, while a call is being checked. Validators get an empty registry, so
nothing is ever retrieved. Schemas of upstream servers are checked without their regular
expressions (`pattern`, `patternProperties`): a hostile pattern can take exponential time on a
short input and stall the daemon; such a server checks its own input anyway.
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import jsonschema
import referencing
import referencing.exceptions

MAX_SCHEMA_ERRORS = 8


class SchemaProblem(ValueError):
    """A schema that cannot be used for a tool's input."""


def _nodes(schema: Any) -> Iterator[dict[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _without_regexes(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_regexes(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {k: _without_regexes(v) for k, v in schema.items() if k != "pattern"}
    if "patternProperties" in copy:
        del copy["patternProperties"]
        if copy.get("additionalProperties") is False:
            del copy["additionalProperties"]  # the names those patterns allowed stay allowed
    return copy


def input_validator(
    schema: dict[str, Any], *, run_regexes: bool = True
) -> jsonschema.Draft202012Validator:
    """A validator for a tool input schema; SchemaProblem when it is not a valid JSON Schema of
    an object or refers outside itself."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.path) or "(top)"
        raise SchemaProblem(f"not a valid JSON Schema at {where}: {exc.message}") from exc
    if schema.get("type") != "object":
        raise SchemaProblem('the input must be an object: say "type": "object"')
    for node in _nodes(schema):
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if isinstance(ref, str) and not ref.startswith("#"):
                raise SchemaProblem(f"{key} {ref!r} points outside the schema; only #... refs")
    checked = schema if run_regexes else _without_regexes(schema)
    return jsonschema.Draft202012Validator(checked, registry=referencing.Registry())


def _where(error: jsonschema.ValidationError) -> str:
    return "/".join(str(part) for part in error.absolute_path) or "(input)"


def schema_errors(validator: jsonschema.Draft202012Validator, document: Any) -> list[str]:
    """What is wrong with `document`, one line per problem (the first few), by field."""
    try:
        errors = sorted(validator.iter_errors(document), key=_where)
    except referencing.exceptions.Unresolvable as exc:
        return [f"- the tool's input schema refers to something it does not define ({exc})"]
    return [f"- `{_where(e)}`: {e.message}" for e in errors[:MAX_SCHEMA_ERRORS]]


# --- checking in a process of its own ------------------------------------------------------------

VALIDATION_TIMEOUT_S = 2.0
"""Longest one check may take; past it the checking process is killed and the call refused."""
_WORKERS = 4


def _serve(conn: Connection) -> None:  # pragma: no cover - runs in the checking process
    """The checking process: validators by schema, answers one request at a time."""
    validators: dict[str, jsonschema.Draft202012Validator] = {}
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        schema_text, document, run_regexes = json.loads(request)
        key = f"{run_regexes}:{schema_text}"
        validator = validators.get(key)
        if validator is None:
            if len(validators) > 256:
                validators.clear()
            validator = validators[key] = input_validator(
                json.loads(schema_text), run_regexes=run_regexes
            )
        conn.send_bytes(json.dumps(schema_errors(validator, document)).encode())


class _Checker:
    """One checking process and the pipe to it."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(child,), name="tooljail-schema-check", daemon=True
        )
        self.process.start()
        child.close()

    def close(self) -> None:
        self.conn.close()
        self.process.kill()
        self.process.join(5)


class IsolatedChecks:
    """Checks inputs against schemas in separate processes, each check bounded in time.

    A backtracking regex or a quadratic keyword (uniqueItems over many objects) holds the GIL
    for as long as it runs, so in the daemon's process it would stall every call, even from a
    worker thread. In a process of its own it stalls nothing, and the process is killed when it
    runs past the deadline. Blocking: call it from a worker thread (Pipeline.prepare_off_loop).
    """

    def __init__(self, workers: int = _WORKERS, timeout_s: float = VALIDATION_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._idle: queue.LifoQueue[_Checker | None] = queue.LifoQueue()
        for _ in range(workers):
            self._idle.put(None)  # started on first use
        self._turns: dict[str, threading.Lock] = {}
        self._turns_lock = threading.Lock()

    def _turn(self, who: str) -> threading.Lock:
        with self._turns_lock:
            if len(self._turns) > 4096:
                self._turns = {k: v for k, v in self._turns.items() if v.locked()}
            return self._turns.setdefault(who, threading.Lock())

    def errors(
        self, schema: dict[str, Any], document: Any, *, run_regexes: bool, who: str = ""
    ) -> list[str]:
        """What is wrong with `document` (empty: nothing); a line saying the check took too
        long when it did. `who` (a principal) has one check running at a time: its slow inputs
        queue behind each other, not in front of everyone else's."""
        with self._turn(who):
            return self._errors(schema, document, run_regexes)

    def _errors(self, schema: dict[str, Any], document: Any, run_regexes: bool) -> list[str]:
        request = json.dumps([json.dumps(schema, sort_keys=True), document, run_regexes]).encode()
        checker = self._idle.get()
        try:
            if checker is None or not checker.process.is_alive():
                checker = _Checker()
            checker.conn.send_bytes(request)
            answered = checker.conn.poll(self._timeout_s)
            answer: list[str] = json.loads(checker.conn.recv_bytes()) if answered else []
        except (OSError, EOFError, ValueError):
            if checker is not None:
                checker.close()
            self._idle.put(None)
            return ["- the input could not be checked (the checking process failed); retry"]
        if answered:
            self._idle.put(checker)
            return answer
        checker.close()
        self._idle.put(None)
        return [
            f"- checking the input against the tool's schema took longer than "
            f"{self._timeout_s:g} s and was stopped; send a smaller or simpler input"
        ]


_shared: IsolatedChecks | None = None
_shared_lock = threading.Lock()


def isolated_checks() -> IsolatedChecks:
    """The daemon's checking processes (started on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = IsolatedChecks()
        return _shared
