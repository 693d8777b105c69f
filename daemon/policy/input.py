"""The policy input documents, version 1: one pydantic model per document, from which both the
document sent to OPA and `policies/input.schema.json` are made (`python -m daemon.policy.input`
writes the schema; a test keeps the committed file equal to it, and `opa check -s` type-checks the
policies against it).

Three documents: one call (data.tooljail.authz.decision), a tool listing (visible_tools) and a
session over an existing directory (open_session).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import GenerateJsonSchema, models_json_schema
from typing_extensions import TypedDict

from daemon.models import Caller as CallerModel
from daemon.models import Transport
from daemon.policy.approval import Grant as ApprovalGrant
from daemon.policy.document_body import LargeDocument
from daemon.policy.egress_verdict import AddressRange
from daemon.sessions.session import REFUSAL_WINDOW_S, Mode, Session
from daemon.sessions.workspaces import Overlap
from daemon.tools.call import ToolCall
from daemon.tools.contract import ToolOrigin, TouchedPath
from daemon.tools.registry import ToolDefinition
from daemon.tools.schema import tidy_schema

INPUT_VERSION: Literal[1] = 1
SCHEMA_ID = "urn:tooljail:policy-input:v1"

_TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolOriginFact(_Part):
    """Where a tool comes from."""

    kind: Literal["builtin", "operator", "mcp"] = Field(
        description="builtin: tooljail's own; operator: defined in the policy folder's tools/ "
        "(git); mcp: a tool of an upstream MCP server."
    )
    server: str = Field(description="The MCP server's configured name; empty otherwise.")
    trusted: bool = Field(
        description="builtin and operator tools: true. mcp: whether the operator marked the "
        "server trusted (only then are its annotations believed as traits)."
    )

    @classmethod
    def of(cls, origin: ToolOrigin) -> ToolOriginFact:
        """The fact for a tool's origin."""
        return cls.model_construct(kind=origin.kind, server=origin.server, trusted=origin.trusted)


class Tool(_Part):
    """The tool's name, traits (the daemon's ToolTraits) and origin."""

    name: Annotated[str, Field(pattern=_TOOL_NAME)]
    read_only: bool = Field(
        description="Never changes anything; runs on the host, confined to the workspace."
    )
    destructive: bool = Field(description="May overwrite or delete existing data.")
    concurrency_safe: bool = Field(
        description="May run in parallel with other concurrency-safe calls."
    )
    sandboxed: bool = Field(description="Runs in a disposable container.")
    origin: ToolOriginFact

    @classmethod
    def of(cls, definition: ToolDefinition) -> Tool:
        """A tool's declared traits."""
        traits = definition.traits
        return cls.model_construct(
            name=definition.name,
            read_only=traits.read_only,
            destructive=traits.destructive,
            concurrency_safe=traits.concurrency_safe,
            sandboxed=traits.sandboxed,
            origin=ToolOriginFact.of(definition.origin),
        )


class TouchedPathFact(_Part):
    """A path the call touches."""

    path: str = Field(
        min_length=1,
        pattern="^/",
        description="Absolute, normalised path with symlinks resolved.",
    )
    access: Literal["read", "write"]
    inside_workspace: bool = Field(
        description="The daemon's verdict; the policy also checks the path's prefix itself."
    )
    kept_output: bool = Field(
        default=False,
        description="One of the session's kept outputs (a result over its budget, saved whole "
        "by the daemon under session.kept_outputs); only Read reaches one.",
    )


class Grant(_Part):
    """What one session-scoped approval covers. Bash: the command prefix as words; it covers a
    fully parsed line when every simple command's argv starts with those words. File tools: a
    directory ending in /; it covers a call of the same tool when every path it touches starts
    with it."""

    tool: str = Field(
        pattern=_TOOL_NAME,
        description="The tool the approval was given for; a grant covers calls of that tool only.",
    )
    pattern: str = Field(
        min_length=1,
        description="Bash: the words joined by spaces (for people); file tools: the absolute "
        "directory, ending in /.",
    )
    words: list[str] = Field(
        description="Bash: the command prefix as argv words (what the policy matches); empty for "
        "file tools. A Bash grant without words, or with an empty word, covers nothing."
    )
    reasons: list[str] = Field(
        default=[],
        description="The asks the person was shown when approving: the grant lifts a call's asks "
        "only when each is one of these.",
    )


class RefusalCounts(TypedDict):
    """A tool's refused calls in the session's recent past."""

    deny: Annotated[int, Field(ge=0)]
    ask: Annotated[int, Field(ge=0)]


class SessionFacts(_Part):
    """The session the call runs in."""

    id: str = Field(min_length=1)
    workspace: str = Field(
        pattern="^/", description="Absolute, resolved workspace root of the session."
    )
    mode: Mode = Field(
        description="The session's permission mode. default: the rules as they are; "
        "acceptEdits: Write, Edit and MultiEdit inside the workspace never ask; plan: only "
        "read-only tools run; dontAsk: what would ask is denied; bypassPermissions: what would "
        "ask runs, for principals data.json allows to use it (everyone else is denied every "
        "call). Any other value, or none, is denied."
    )
    grants: list[Grant] = Field(
        description='Approvals a person gave with approval scope "session", in force until the '
        "session ends. A grant that covers a call lifts its asks, never its denies."
    )
    kept_outputs: str = Field(
        default="",
        description="The folder of the session's kept outputs (results over their budget, saved "
        "whole for Read); empty until one was kept.",
    )
    default: bool = Field(
        default=False,
        description="The caller's default session (no session_id given): in the daemon's "
        "configured workspace, which has no disk budget and which every principal's default "
        "session may share, unless own_folder.",
    )
    own_folder: bool = Field(
        default=False,
        description="A default session in a folder of its own (a tenant's, with "
        'workspaces.tenant_defaults = "own"): no other principal\'s session works there, and '
        "it has a fresh workspace's disk budget.",
    )
    recent_refusals: dict[str, RefusalCounts] = Field(
        default_factory=dict,
        description="Per tool, how many of the session's calls of it the policy denied or asked "
        "a person about in the last 10 minutes (tools without any are left out).",
    )

    @classmethod
    def of(cls, session: Session) -> SessionFacts:
        """As the policy sees a session."""
        return cls.model_construct(
            id=session.id,
            workspace=str(session.workspace),
            mode=session.mode,
            grants=[
                Grant.model_construct(
                    tool=g.tool, pattern=g.pattern, words=list(g.words), reasons=list(g.reasons)
                )
                for g in session.grants
            ],
            kept_outputs=str(session.kept_outputs or ""),
            default=session.is_default,
            own_folder=session.own_folder,
            # Plain JSON already (the call document's _plain passes dicts through as they are).
            recent_refusals=cast(
                dict[str, RefusalCounts], session.recent_refusals(REFUSAL_WINDOW_S)
            ),
        )


class Caller(_Part):
    """Who calls, as the transport established it (never taken from request fields)."""

    principal: str = Field(
        min_length=1, description="Key into data.tooljail.principals for per-principal settings."
    )
    transport: Transport = Field(
        description="unix: the Unix socket; tcp: TCP with a bearer token; tcp+mtls: TCP with a "
        "verified client certificate; inproc: inside the daemon; unknown: anything else."
    )

    @classmethod
    def of(cls, caller: CallerModel) -> Caller:
        """As the policy sees a caller."""
        return cls.model_construct(principal=caller.principal, transport=caller.transport)


class NoApproval(_Part):
    """The call carries no approval."""

    granted: Literal[False]


class GrantedApproval(_Part):
    """The call carries a valid approval token."""

    granted: Literal[True]
    token_id: str = Field(
        min_length=1, description="Identifier of the approval token (for the audit log)."
    )
    approved_by: str = Field(
        min_length=1,
        description="Who approved: the approver that answered the pending ask, a "
        'PermissionRequest hook that answered it ("hook:<name>"), or the caller itself when '
        "it sent its token back without anyone else approving (self_approved).",
    )
    self_approved: bool = Field(
        description="Nobody but the asking principal approved this call; the policy decides "
        "whether that counts (the shipped one: for the Unix socket's caller, or a principal "
        "with self_approve in data.json)."
    )
    scope: Literal["once", "session"] = Field(
        description="What the approval covers: this call, or similar calls for the rest of the "
        "session (fixed by the approver; a self-approval's is what the retry asked for)."
    )
    issued_at: int = Field(ge=0, description="When the token was issued, in Unix seconds.")
    expires_at: int = Field(ge=0, description="When the token expires, in Unix seconds.")


Approval = Annotated[
    NoApproval | GrantedApproval,
    Field(
        discriminator="granted",
        description="Whether the call carries a valid human approval token. The daemon verified "
        "the token (signature, binding to this session, tool_use id, input hash and principal, "
        "expiry, single use) before saying granted; a granted approval lifts asks, never denies.",
    ),
]


class HookDecision(_Part):
    """What one PreToolUse hook answered for this call."""

    name: str = Field(
        min_length=1,
        description="The hook's name from the daemon config; it prefixes the hook's reason.",
    )
    decision: Literal["allow", "deny", "ask", "none"] = Field(
        description="allow (adds nothing), deny (refuses the call), ask (a person must approve), "
        "none (no decision). A hook that timed out or crashed is sent as deny when it fails "
        "closed."
    )
    reason: str = Field(
        description="The hook's reason (permissionDecisionReason, or stderr for exit code 2); "
        "may be empty."
    )


class SimpleCommand(_Part):
    """One simple command of a Bash line."""

    argv: list[str] = Field(
        min_length=1,
        description="The real program's words after quote removal; expansions such as $HOME are "
        "kept as written.",
    )
    name: str = Field(description="Basename of the executable (`rm` for `/bin/rm`).")
    path: str = Field(description="The executable as written.")
    wrappers: list[str] = Field(
        description="What was peeled off, outermost first, by basename: sudo, doas, env, "
        "timeout, nice, nohup, stdbuf, xargs, command, exec, time, `bash -c`, `sh -c`, "
        "`find -exec`, ..."
    )
    assignments: list[str] = Field(
        default=[], description="NAME=value words before the command or given to sudo/env."
    )
    context: str = Field(
        description="Innermost construct around it: simple, list, pipeline, subshell, group, "
        "command_substitution, process_substitution, if, while, for, case, function."
    )
    pipeline: int = Field(
        default=0,
        ge=0,
        description="Number of the pipeline it is a stage of (1, 2, ...); 0 for none.",
    )
    stage: int = Field(default=0, ge=0, description="Its position in that pipeline, from 0.")
    dynamic: bool = Field(
        default=False,
        description="The executable word holds an expansion or pattern, so the real program is "
        "only known at run time.",
    )
    stdin_texts: list[str] = Field(
        default=[],
        description="The heredoc bodies and here-strings it is fed, as written: an interpreter "
        "with no program named reads its program there (`python3 <<EOF`).",
    )
    stdin_dynamic: bool = Field(
        default=False,
        description='One of stdin_texts is only known when it runs (`python3 <<< "$C"`, a '
        "heredoc whose delimiter is not quoted that expands something).",
    )
    stdin_stream: bool = Field(
        default=False,
        description="Its input is a stream another command writes, as a later pipeline stage's "
        "is: a process substitution (`bash < <(echo ...)`) or a descriptor it was given (`<&3`).",
    )
    stdin_read_as: list[str] = Field(
        default=[],
        description="Those of stdin_texts an interpreter may read otherwise than written, as "
        "it may read them: escapes such as \\u0063 decoded and NFKC applied (Python reads "
        "`ｃhmod` as `chmod`).",
    )
    stdin_unread_escape: bool = Field(
        default=False,
        description="One of stdin_texts holds an escape that may stand for a letter and that "
        "could not be read (a \\N{...} under a name Unicode does not give, Perl's \\L, \\c).",
    )
    cwd: str = Field(
        default="",
        description="The directory it runs in: the call's working directory, followed through "
        "the `cd`s before it in the line while that is certain; empty when unknown.",
    )
    words: list[WordFact] = Field(
        default=[], description="argv after the program, each with what is known of it."
    )
    reads_only: bool = Field(
        default=False,
        description="A known reader used only with options known to only read (as a read-only "
        "line is told apart).",
    )
    program_reads_only: bool = Field(
        default=False,
        description="The same for the program and its words alone, whatever runs it (xargs, "
        "find -exec): what it is handed is not looked at.",
    )
    git: GitFact | None = Field(default=None, description="For git: the line as git reads it.")


class WordFact(_Part):
    """One word of a simple command after the program."""

    text: str = Field(description="As written, after quote removal.")
    dynamic: bool = Field(
        description="Its value is only known at run time (an expansion, a glob, a brace, ~)."
    )
    path: str = Field(
        description="For a static word that is not an option: the absolute normalised path it "
        "would name from `cwd` (whether it is one depends on the program); empty when unknown."
    )
    basename: str = Field(
        default="",
        description="A word without a `path` only (dynamic, or where it is cannot be told): the "
        "end of the file name it may name, as far as it is known before it runs (the text after "
        "its last `/` or run-time piece).",
    )
    basename_whole: bool = Field(
        default=False,
        description="A word without a `path` only: `basename` is the whole name (`$D/config`, "
        "`pre-commit`), not only its end (`conf?g`: `g`).",
    )
    read_as: str = Field(
        default="",
        description="Only when an interpreter may read it otherwise than written: the word as it "
        "may read it, escapes such as \\u0063 decoded and NFKC applied (Python reads `ｃhmod` "
        "as `chmod`).",
    )
    unread_escape: bool = Field(
        default=False,
        description="It holds an escape that may stand for a letter and that could not be read "
        "(a \\N{...} under a name Unicode does not give, Perl's \\L, \\c).",
    )


class GitFact(_Part):
    """A git command line read the way git reads it."""

    directory: str = Field(description="Where it works (-C applied); empty when unknown.")
    config: list[str] = Field(description="Its `-c name=value` overrides.")
    redirected: bool = Field(
        description="It names another repository, work tree, configuration or program "
        "directory (--git-dir, --work-tree, --exec-path, --config-env, ...)."
    )
    subcommand: str = Field(description="Empty when missing or only known at run time.")
    known: bool = Field(
        description="One of git's own commands (else an alias or a git-<name> program)."
    )
    options: list[str] = Field(
        description="The subcommand's options, long ones spelled out in full, short clusters "
        "split (`-fd` is -f and -d); `--name=value` kept whole."
    )
    operands: list[str]
    args: list[str] = Field(description="Everything after the subcommand, as written.")
    dynamic: bool = Field(description="An option or the subcommand is only known at run time.")


class Redirect(_Part):
    """One redirection of a Bash line."""

    op: str = Field(description="The operator with its file descriptor, e.g. `>`, `2>`, `&>`, `<`.")
    target: str = Field(description="The target word as written.")


class WrittenFile(_Part):
    """An output redirection's target, as the files it may name."""

    target: str = Field(description="The target as written.")
    normal: str = Field(
        default="",
        description="The target with `.`, `..` and repeated slashes resolved lexically.",
    )
    paths: list[str] = Field(
        description="Full paths with links on disk followed: from the directory the line starts "
        "in (the session's cwd) and from each directory a `cd` in it is followed to."
    )
    known: bool = Field(
        description="False when where it writes cannot be told: an expansion in the target, a "
        "`cd` that cannot be followed, a program in the line that may make links or move names "
        "(any but known readers and a few plain writers), too many paths to resolve. "
        "`paths` is then incomplete."
    )
    basename: str = Field(
        default="",
        description="The end of the file name it names, as far as it is known before the line "
        "runs: after its last `/` or run-time piece.",
    )
    basename_whole: bool = Field(
        default=True, description="`basename` is the whole name, not only its end (`conf?g`)."
    )


class Command(_Part):
    """Bash only: the command line parsed without running anything. Every simple command found
    anywhere in it (pipelines, lists, subshells, groups, command and process substitutions,
    if/while/for/case and function bodies, `bash -c` strings parsed again) with wrappers peeled
    off."""

    raw: str = Field(description="The command line as the model wrote it.")
    parsed: bool = Field(
        description="False when any part could not be parsed or analysed; the other fields are "
        "then best effort."
    )
    parse_error: str = Field(
        description="What could not be parsed, where, and what to do about it; empty when parsed."
    )
    cwd: str = Field(
        default="", description="The session's working directory, where the command starts."
    )
    hidden_code: list[str] = Field(
        default=[],
        description="Words holding code bash runs although a parser sees data: a command "
        "substitution inside an array subscript (printf -v, test -v, declare, arithmetic).",
    )
    simple_commands: list[SimpleCommand]
    redirects: list[Redirect]
    written_paths: list[str] = Field(
        description="Targets of the output redirections, as written (paths a program writes by "
        "itself are not guessed)."
    )
    written_files: list[WrittenFile] = Field(
        default=[],
        description="Each output redirection's target as the files it may be, one per "
        "directory the line may be in when it writes.",
    )


class DecisionInput(_Part):
    """The input document for data.tooljail.authz.decision: may this one call run?"""

    model_config = ConfigDict(title="tooljail call decision policy input")

    version: Literal[1] = Field(
        description="Version of this document's shape; a policy denies versions it does not "
        "understand."
    )
    tool: Tool
    input: dict[str, Any] = Field(
        description="The tool input after validation against the tool's input model (e.g. Read: "
        "file_path, offset, limit; Bash: command, timeout in ms)."
    )
    paths: list[TouchedPathFact] = Field(
        description="Every path the call touches, resolved by the daemon (symlinks followed). For "
        "Bash, the directory the command starts in (access write); what the command itself "
        "touches is described by `command` instead."
    )
    session: SessionFacts
    caller: Caller
    approval: Approval
    command: Command | None = Field(default=None, description="Bash only.")
    refused_before: RefusalCounts = Field(
        default_factory=lambda: RefusalCounts(deny=0, ask=0),
        description="How many times this very call (same tool, same input) was denied or asked "
        "about in the session in the last 10 minutes.",
    )
    hooks: list[HookDecision] | None = Field(
        default=None,
        description="The decisions of the PreToolUse hooks that matched this call, in the order "
        "they are configured. Absent or empty when no hook matched. A hook's deny refuses the "
        "call, its ask needs a person's approval, its allow adds nothing.",
    )


class ListToolsInput(_Part):
    """The input document for data.tooljail.authz.visible_tools: which of these tools may this
    caller see?"""

    model_config = ConfigDict(title="tooljail ListTools policy input")

    version: Literal[1]
    caller: Caller
    session: SessionFacts
    tools: list[Tool]


class OverlapFact(_Part):
    """An open session whose workspace overlaps the one asked for."""

    session: str = Field(min_length=1, description="The open session's id.")
    workspace: str = Field(pattern="^/", description="Its workspace.")
    relation: Literal["same", "inside", "contains"] = Field(
        description="same: the same directory; inside: the requested directory is inside that "
        "workspace; contains: that workspace is inside the requested directory."
    )


class OpenSessionInput(_Part):
    """The input document for data.tooljail.authz.open_session: may this existing directory
    become a session's workspace? The answer is {"allow": bool, "reasons": [string]}."""

    model_config = ConfigDict(title="tooljail OpenSession policy input")

    version: Literal[1]
    workspace: str = Field(
        pattern="^/",
        description="The requested directory: absolute, with no symbolic link in any component "
        "(the daemon refuses one that has any, and holds the directory by descriptor).",
    )
    overlaps: list[OverlapFact] = Field(
        description="Open sessions (the default one included) whose workspaces overlap it. A "
        "sandbox of one could change the other's tree, so the shipped policy refuses any overlap "
        "unless data.tooljail.principals[p].overlapping_workspaces is true."
    )
    caller: Caller


class SessionModeInput(_Part):
    """The input document for data.tooljail.authz.session_mode_change: may this caller put a
    session in this permission mode (OpenSession's mode, SetSessionMode)? The answer is
    {"allow": bool, "reasons": [string]}."""

    model_config = ConfigDict(title="tooljail session mode policy input")

    version: Literal[1]
    mode: str = Field(description="The requested permission mode, as the caller sent it.")
    action: Literal["open", "change"] = Field(
        description="open: a new session in this mode (OpenSession); change: an open session "
        "switched to it (SetSessionMode)."
    )
    session_owner: str = Field(
        description="The principal the session belongs to (for open: the caller itself)."
    )
    caller: Caller


class AskFact(_Part):
    """A pending ask, as an approver is about to answer it."""

    approval_id: str = Field(min_length=1)
    principal: str = Field(description="Who made the call the policy asked about.")
    session: str
    tool: str
    reasons: list[str] = Field(description="Why the policy asked.")


class ApprovalInput(_Part):
    """The input document for data.tooljail.authz.approve: may this caller answer this pending
    ask (Admin.Approve, Admin.Deny) or see it (ListPendingApprovals)? The answer is
    {"allow": bool, "reasons": [string]}."""

    model_config = ConfigDict(title="tooljail approval policy input")

    version: Literal[1]
    action: Literal["list", "approve", "deny"]
    scope: Literal["once", "session"] = Field(
        description="For approve: this call only, or similar calls for the rest of the session."
    )
    ask: AskFact
    caller: Caller


def session_mode_document(
    mode: str, action: Literal["open", "change"], session_owner: str, caller: CallerModel
) -> dict[str, Any]:
    """The input of data.tooljail.authz.session_mode_change."""
    return SessionModeInput.model_construct(
        version=INPUT_VERSION,
        mode=mode,
        action=action,
        session_owner=session_owner,
        caller=Caller.of(caller),
    ).model_dump(mode="json", warnings=False)


def approval_document(
    action: Literal["list", "approve", "deny"],
    scope: Literal["once", "session"],
    ask: AskFact,
    caller: CallerModel,
) -> dict[str, Any]:
    """The input of data.tooljail.authz.approve."""
    return ApprovalInput.model_construct(
        version=INPUT_VERSION, action=action, scope=scope, ask=ask, caller=Caller.of(caller)
    ).model_dump(mode="json", warnings=False)


def _path(touched: TouchedPath) -> TouchedPathFact:
    return TouchedPathFact.model_construct(
        path=str(touched.path),
        access=touched.access,
        inside_workspace=touched.inside_workspace,
        kept_output=touched.kept_output,
    )


def _approval(grant: ApprovalGrant | None) -> NoApproval | GrantedApproval:
    if grant is None:
        return NoApproval.model_construct(granted=False)
    return GrantedApproval.model_construct(**grant.policy_input())


def call_document(
    call: ToolCall,
    caller: CallerModel,
    grant: ApprovalGrant | None,
    hooks: list[dict[str, str]],
) -> dict[str, Any]:
    """The input of data.tooljail.authz.decision for one call: the daemon's part from
    DecisionInput, then the tool's own facts (Bash: `command`, shaped like `Command`)."""
    document = {**call.facts.policy, **_plain(decision_input(call, caller, grant, hooks))}
    return LargeDocument(document) if call.large_input else document


def decision_input(
    call: ToolCall,
    caller: CallerModel,
    grant: ApprovalGrant | None,
    hooks: list[dict[str, str]],
) -> DecisionInput:
    """The daemon's part of a call's policy input, as a model (built unvalidated: every value
    comes from the daemon's own typed objects)."""
    traits = call.tool.traits
    return DecisionInput.model_construct(
        version=INPUT_VERSION,
        tool=Tool.model_construct(
            name=call.tool.name,
            read_only=call.facts.read_only,
            destructive=traits.destructive,
            concurrency_safe=call.facts.concurrency_safe,
            sandboxed=traits.sandboxed,
            origin=ToolOriginFact.of(call.tool.origin),
        ),
        input=call.input_json,
        paths=[_path(p) for p in call.facts.paths],
        session=SessionFacts.of(call.session),
        caller=Caller.of(caller),
        approval=_approval(grant),
        hooks=[HookDecision.model_validate(hook) for hook in hooks] or None,
        refused_before=_refused_before(call),
    )


def _refused_before(call: ToolCall) -> RefusalCounts:
    """The call's own refusals (its input is hashed only when its tool has any lately)."""
    session = call.session
    if not any(tool == call.tool.name for _, tool, _, _ in session.refusals):
        return RefusalCounts(deny=0, ask=0)
    counts = session.refusals_of(call.tool.name, call.input_hash, REFUSAL_WINDOW_S)
    return RefusalCounts(deny=counts["deny"], ask=counts["ask"])


def _plain(value: Any) -> Any:
    """A model built with model_construct as the JSON value model_dump(mode="json",
    exclude_none=True) gives, at a fraction of its cost on every call's path (the models have
    no aliases or custom serializers; test_policy_schema checks the result against the schema).
    Values that are not models (the tool input) are JSON already."""
    if isinstance(value, BaseModel):
        return {k: _plain(v) for k, v in value.__dict__.items() if v is not None}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def listing_document(
    definitions: Iterable[ToolDefinition], session: Session, caller: CallerModel
) -> dict[str, Any]:
    """The input of data.tooljail.authz.visible_tools for ListTools."""
    return ListToolsInput.model_construct(
        version=INPUT_VERSION,
        caller=Caller.of(caller),
        session=SessionFacts.of(session),
        tools=[Tool.of(definition) for definition in definitions],
    ).model_dump(mode="json", warnings=False)


def open_session_document(
    workspace: str, overlaps: list[Overlap], caller: CallerModel
) -> dict[str, Any]:
    """The input of data.tooljail.authz.open_session."""
    return OpenSessionInput.model_construct(
        version=INPUT_VERSION,
        workspace=workspace,
        overlaps=[
            OverlapFact.model_construct(
                session=o.session, workspace=o.workspace, relation=o.relation
            )
            for o in overlaps
        ],
        caller=Caller.of(caller),
    ).model_dump(mode="json", warnings=False)


class EgressCallFacts(_Part):
    """The sandboxed call a connection belongs to (known from the socket it arrived on)."""

    tool_use_id: str
    tool: str = Field(pattern=_TOOL_NAME)
    caller: Caller
    session: SessionFacts
    command: Command | None = Field(
        default=None, description="Bash: the command line as the call decision saw it."
    )


class EgressAddress(_Part):
    """One address the destination's name resolved to (or the literal it named)."""

    address: str
    range: AddressRange = Field(
        description="public; loopback; private (RFC 1918, carrier-grade NAT, documentation "
        "ranges); link_local; unique_local (fc00::/7); metadata (cloud instance metadata "
        "endpoints); multicast; unspecified; reserved. IPv4-mapped and NAT64 addresses count "
        "as the IPv4 address they carry."
    )


class EgressDestination(_Part):
    """Where the connection (or plain-HTTP request) goes."""

    via: Literal["connect", "http"] = Field(
        description="connect: a CONNECT tunnel (host and port only; https and anything else); "
        "http: one request (plain http://, or inside an intercepted tunnel)."
    )
    host: str = Field(description="Lower-case host name without a trailing dot, or an IP.")
    port: int = Field(ge=1, le=65535)
    scheme: Literal["http", "https"] | None = Field(default=None, description="via http only.")
    method: str | None = Field(default=None, description="via http only.")
    path: str | None = Field(default=None, description="via http only: path and query.")
    addresses: list[EgressAddress] = Field(
        description="The host's address when the host is an IP; empty for a name, which the "
        "proxy resolves only after an allowing decision (resolving first would carry refused "
        "names, and whatever they encode, to outside DNS servers). It then resolves the name "
        "once and connects to the first address whose range the decision's address_ranges "
        "allows, never to a later lookup's."
    )
    intercepted: bool = Field(
        description="A configured credential names this destination: its TLS is terminated "
        "by the proxy and each request inside is decided with via http."
    )


class EgressUsage(_Part):
    """What the call used so far."""

    connections: int = Field(ge=0)
    bytes: int = Field(ge=0, description="Both directions, all of the call's connections.")


class EgressInput(_Part):
    """Input of data.tooljail.authz.egress: one outbound connection of a sandboxed call."""

    model_config = ConfigDict(title="tooljail egress policy input")

    version: Literal[1]
    call: EgressCallFacts
    destination: EgressDestination
    usage: EgressUsage


def egress_call_facts(call: ToolCall, caller: CallerModel) -> dict[str, Any]:
    """The call part of every egress input of `call`, as JSON."""
    command = call.facts.policy.get("command")
    facts = EgressCallFacts.model_construct(
        tool_use_id=call.tool_use_id,
        tool=call.tool.name,
        caller=Caller.of(caller),
        session=SessionFacts.of(call.session),
    )
    plain: dict[str, Any] = _plain(facts)
    if command is not None:
        plain["command"] = command
    return plain


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")
_DEF_NAMES = {"TouchedPathFact": "touched_path", "SessionFacts": "session"}


class _SnakeCaseDefs(GenerateJsonSchema):
    """$defs named as the policy README writes them (`touched_path`, `list_tools_input`)."""

    def normalize_name(self, name: str) -> str:
        name = super().normalize_name(name)
        return _DEF_NAMES.get(name) or _SNAKE.sub("_", name).lower()


def input_schema() -> dict[str, Any]:
    """policies/input.schema.json: any of the six documents. Optional fields are left out of
    a document rather than sent as null, so the schema has no null branches (tidy_schema)."""
    _, top = models_json_schema(
        [
            (m, "validation")
            for m in (
                DecisionInput,
                ListToolsInput,
                OpenSessionInput,
                SessionModeInput,
                ApprovalInput,
                EgressInput,
            )
        ],
        ref_template="#/$defs/{model}",
        schema_generator=_SnakeCaseDefs,
    )
    top = tidy_schema(top)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "tooljail policy input, version 1",
        "description": "The input document the daemon sends to OPA: one of decision_input "
        "(data.tooljail.authz.decision, one tool call), list_tools_input "
        "(data.tooljail.authz.visible_tools), open_session_input "
        "(data.tooljail.authz.open_session), session_mode_input "
        "(data.tooljail.authz.session_mode_change), approval_input "
        "(data.tooljail.authz.approve) and egress_input (data.tooljail.authz.egress, one "
        "outbound connection of a sandboxed call). Generated from daemon/policy/input.py.",
        "anyOf": [
            {"$ref": "#/$defs/decision_input"},
            {"$ref": "#/$defs/list_tools_input"},
            {"$ref": "#/$defs/open_session_input"},
            {"$ref": "#/$defs/session_mode_input"},
            {"$ref": "#/$defs/approval_input"},
            {"$ref": "#/$defs/egress_input"},
        ],
        "$defs": top["$defs"],
    }


def schema_text() -> str:
    """The schema as committed."""
    return json.dumps(input_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
