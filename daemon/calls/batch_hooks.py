"""PostToolBatch: the hooks that run once every call of a batch (one assistant turn) answered.

They read every call with its answer. Their text for the model goes with the batch's last
answer (ExecuteBatch, ExecuteBatchStream: that answer waits for them) or, for ExecuteTurn, whose
last answer may have gone before the client ended the turn, in a closing BatchEnd event. Their
messages for the user go beside it the same way. They cannot undo anything: the calls ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.calls.audit import AuditEvent, AuditLog
from daemon.calls.budget import fit_with_notes
from daemon.errors import ToolError
from daemon.hooks.engine import HookEngine, response_text
from daemon.hooks.protocol import BatchCall
from daemon.models import Caller, ExecuteOutcome
from daemon.sessions.session import Session


@dataclass(frozen=True)
class BatchNotes:
    """What the PostToolBatch hooks said."""

    additional_context: tuple[str, ...]
    """Text for the model, each naming its hook."""
    system_messages: tuple[str, ...]
    """Messages for the user, each naming its hook."""

    def __bool__(self) -> bool:
        return bool(self.additional_context or self.system_messages)


@dataclass(frozen=True)
class AnsweredCall:
    """One call of the batch: its tool_use as sent (the validated input when it had one)."""

    tool_name: str
    tool_input: dict[str, Any]
    tool_use_id: str


class BatchHooks:
    """Runs PostToolBatch hooks (a no-op without any)."""

    def __init__(
        self,
        engine: HookEngine | None,
        audit: AuditLog,
        mask: Callable[[Any], Any],
        result_budget_chars: int,
    ) -> None:
        self._engine = engine
        self._audit = audit
        self._mask = mask
        self._budget = result_budget_chars

    async def after(
        self,
        session: Session,
        caller: Caller,
        calls: Sequence[AnsweredCall],
        outcomes: Sequence[ExecuteOutcome],
    ) -> BatchNotes:
        """Run the hooks over the answered batch; what they said (empty: nothing)."""
        if self._engine is None or not outcomes:
            return BatchNotes((), ())
        try:
            await session.verify_workspace()  # hooks get the workspace's path
        except ToolError:
            return BatchNotes((), ())
        answered = [
            BatchCall(
                call.tool_name,
                call.tool_input,
                call.tool_use_id,
                response_text(outcome.result.content),
                outcome.result.is_error,
            )
            for call, outcome in zip(calls, outcomes, strict=True)
        ]
        post = await self._engine.post_tool_batch(
            session.id, session.workspace, session.mode, answered
        )
        if post is None:
            return BatchNotes((), ())
        self._audit.write(
            {
                "event": AuditEvent.BATCH_HOOKS.value,
                "time": time.time(),
                "principal": caller.principal,
                "session": session.id,
                # The answer their text went with; tool_use_ids lists the whole batch.
                "tool_use_id": calls[-1].tool_use_id,
                "tool_use_ids": [call.tool_use_id for call in calls],
                "hooks": self._mask(post.to_audit()),
            }
        )
        return BatchNotes(post.additional_context, post.system_messages)

    def attach(self, last: ExecuteOutcome, notes: BatchNotes) -> ExecuteOutcome:
        """The batch's last answer with the hooks' text added (within the result budget)."""
        if not notes:
            return last
        content, _ = fit_with_notes(
            list(last.result.content), list(notes.additional_context), self._budget, "head_tail"
        )
        result = last.result.model_copy(update={"content": tuple(content)})
        messages = (*last.system_messages, *notes.system_messages)
        return last.model_copy(update={"result": result, "system_messages": messages})
