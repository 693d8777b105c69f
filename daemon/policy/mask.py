"""What the audit log (and a person reviewing an ask) must not see in clear, as the policy says.

Two rules from the policy: `data.tooljail.authz.mask`, names of input fields whose whole values
are hidden at any depth (file contents, edit texts), and `data.tooljail.authz.mask_patterns`,
regular expressions for secrets inside any text value (a token in a Bash command, a password in
a URL). A pattern with a group named `secret` hides only that group; otherwise the whole match.
A mask that cannot be read or understood is an error, never an empty mask: an audit that
silently starts logging secrets is worse than a refused reload.

Path fields (PATH_FIELDS) are never masked by patterns: which file a tool touches is always
shown. The input is hostile and may be megabytes: the patterns only ever see a bounded amount of
it. A text longer than MAX_FIELD_CHARS (keys too; a Bash command: WHOLE_FIELD_CHARS, as far as
the parser analyses one) is kept as its start, its length and its SHA-256,
and once MAX_SCANNED_CHARS have been scanned in one value (every value counts at least 8), the
remaining texts are kept as their length and digest, and the remaining containers as a count only,
so what is logged stays bounded however many values the input holds.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import TooljailError
from daemon.policy.command_mask import Parser, hide_in_command
from daemon.shell.parse import MAX_COMMAND_BYTES

MASKED = "***masked***"
MAX_FIELD_CHARS = 8192
"""A longer text is kept as its start (KEPT_CHARS), its length and its SHA-256."""
KEPT_CHARS = 1024
MAX_SCANNED_CHARS = 8 * 1024
"""Text the patterns scan per value masked; beyond it texts are kept as length and digest."""
WHOLE_FIELD_CHARS = {"command": MAX_COMMAND_BYTES}
"""Input fields logged whole up to their own length rather than MAX_FIELD_CHARS: a Bash command
as long as the parser analyses one (daemon.shell.parse.MAX_COMMAND_BYTES; a longer one is
asked about). Attacker round 145: a command of 8,243 characters was logged as its first
1,024, and what ran after them was not shown."""
PATH_FIELDS = frozenset({"file_path", "path", "notebook_path", "glob"})
"""Input fields naming the file or folder a tool touches: bounded, never masked by patterns
(attacker round 145: a Write to `<ws>/A_TOKEN=x/../hidden.sh` was audited with neither its path
nor, masked by field, its content), Grep's glob among them (round 146). Glob's `pattern` is
not one: the name is Grep's regular expression too, which may hold a secret; a tool names such
fields of its own (`Tool.audit_paths`, given to `AuditMask.apply`)."""
CLEAN_TEXTS = 4096
CLEAN_TEXT_CHARS = 256
"""Texts found clean are remembered up to this length, and this many (AuditMask._clean)."""


class MaskError(TooljailError):
    """The policy's mask is missing or malformed."""


@dataclass(frozen=True)
class AuditMask:
    """Field names and secret patterns to hide."""

    fields: frozenset[str] = frozenset()
    patterns: tuple[re.Pattern[str], ...] = ()
    _clean: set[str] = field(default_factory=set, init=False, compare=False, repr=False)
    """Short texts every pattern was run over without hiding anything: calls repeat the same
    keys, tool names and paths, and each text costs one scan per pattern. Only texts with
    nothing to hide are kept (no secret outlives its call here), at most CLEAN_TEXTS of them."""

    @classmethod
    def parse(cls, fields: object, patterns: object) -> AuditMask:
        """From the policy's two rules (their `result` values); MaskError when malformed."""
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise MaskError(
                f"data.tooljail.authz.mask must be a set of field names, got {fields!r:.200}"
            )
        if patterns is None:
            patterns = []
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise MaskError(
                "data.tooljail.authz.mask_patterns must be a set of regular expressions, got "
                f"{patterns!r:.200}"
            )
        compiled = []
        for pattern in sorted(patterns):
            try:
                # ASCII: a name spelt with a lookalike letter (the Kelvin sign for K) is no
                # variable to bash but a program, and must not be masked as one (round 145).
                compiled.append(re.compile(pattern, re.ASCII))
            except re.error as exc:
                raise MaskError(
                    f"data.tooljail.authz.mask_patterns has a pattern the daemon cannot use: "
                    f"{pattern!r:.200}: {exc}"
                ) from None
            if compiled[-1].search(""):
                raise MaskError(
                    f"data.tooljail.authz.mask_patterns has a pattern that matches empty text "
                    f"(it would hide nothing or everything): {pattern!r:.200}"
                )
        return cls(frozenset(fields), tuple(compiled))

    def apply(
        self,
        value: Any,
        *,
        paths: frozenset[str] = frozenset(),
        parse: Parser | None = None,
        runs: bool = True,
    ) -> Any:
        """`value` with masked fields replaced and secrets in its texts (keys included) hidden,
        at any depth, every text bounded (see the module's docstring). `paths`: top-level
        fields of `value` shown like PATH_FIELDS (the files a tool touches). `parse`: a bounded
        Bash parser, given in a worker thread (see daemon.policy.command_mask). `runs`: False
        for the input of a call that was refused before anything could run: its command is
        masked as any text is, a secret hidden there hides nothing that ran (attacker round
        154: a long command of a misspelt tool was logged whole, its token in clear)."""
        return _Masking(self, parse, runs).value(value, PATH_FIELDS | paths)

    def hide_secrets(self, text: str) -> str:
        """The text with every pattern's secret replaced."""
        if text in self._clean:
            return text
        shown = text
        for pattern in self.patterns:
            shown = pattern.sub(_hider, shown)
        if shown == text and len(text) <= CLEAN_TEXT_CHARS:
            if len(self._clean) >= CLEAN_TEXTS:
                self._clean.clear()
            self._clean.add(text)
        return shown


class _Masking:
    """One `apply`: the scan budget it has left."""

    def __init__(self, mask: AuditMask, parse: Parser | None, runs: bool = True) -> None:
        self._mask = mask
        self._parse = parse
        self._runs = runs
        self._budget = MAX_SCANNED_CHARS

    def value(self, value: Any, paths: frozenset[str] = PATH_FIELDS) -> Any:
        if isinstance(value, str):  # the most common value first: this runs on every call
            return self.text(value)
        if isinstance(value, dict):
            if self._budget <= 0:
                return _not_logged(value)
            self._budget -= 8  # even an empty one: a million `{}` must not be logged whole
            masked: dict[str, Any] = {}
            # What a tool runs or touches first: a long field before it must not spend the
            # budget it is shown with (attacker round 148 hid `rm -rf` behind a description).
            first = [
                k for k in (*WHOLE_FIELD_CHARS, *sorted(paths)) if isinstance(value.get(k), str)
            ]
            ordered = itertools.chain(
                ((k, value[k]) for k in first), (i for i in value.items() if i[0] not in first)
            )
            for index, (key, item) in enumerate(ordered):
                if self._budget <= 0:
                    masked["…"] = f"[{len(value) - index} more keys not logged]"
                    break
                shown = named = self.text(str(key))
                suffix = index
                while shown in masked:  # keys masked alike: every one is logged
                    shown = f"{named} ({suffix})"
                    suffix += len(value)
                if key in self._mask.fields:
                    masked[shown] = MASKED
                elif key in paths and isinstance(item, str):
                    masked[shown] = self.text(item, hide=False)
                elif key in WHOLE_FIELD_CHARS and isinstance(item, str):
                    masked[shown] = self.text(item, limit=WHOLE_FIELD_CHARS[key], command=True)
                else:
                    masked[shown] = self.value(item)
            return masked
        if isinstance(value, list | tuple):
            if self._budget <= 0:
                return _not_logged(value)
            self._budget -= 8
            items: list[Any] = []
            for index, item in enumerate(value):
                if self._budget <= 0:
                    items.append(f"… [{len(value) - index} more items not logged]")
                    break
                items.append(self.value(item))
            return items
        self._budget -= 8
        return value

    def text(
        self, text: str, *, hide: bool = True, limit: int = MAX_FIELD_CHARS, command: bool = False
    ) -> str:
        if self._budget <= 0:
            return _described(text, "")
        kept = text if len(text) <= limit else text[:KEPT_CHARS]
        self._budget -= max(len(kept), 8)
        if not (hide and self._mask.patterns):
            shown = kept
        elif command and self._runs:  # masked where it carries a secret (command_mask)
            shown = hide_in_command(kept, self._mask.hide_secrets, MASKED, self._parse)
        else:
            shown = self._mask.hide_secrets(kept)
        return shown if kept is text else _described(text, shown)


def _not_logged(container: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> str:
    """Past the budget a whole container is one line: the audit must not grow with the number of
    values a hostile input holds (the call's input_sha256 still binds it)."""
    return f"… [{len(container)} items not logged]"


def _described(text: str, start: str) -> str:
    """A text too long (or past the scan budget) to log: its start, length and digest."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{start}… [{len(text)} characters, sha256 {digest}]"


def _hider(match: re.Match[str]) -> str:
    if "secret" not in match.re.groupindex or match.group("secret") is None:
        return MASKED
    start, end = match.span("secret")
    whole_start = match.start()
    text = match.group(0)
    return text[: start - whole_start] + MASKED + text[end - whole_start :]
