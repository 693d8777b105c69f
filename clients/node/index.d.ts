// Types of @tooljail/client (the code is plain JavaScript in src/; these declarations are its
// contract and its reference documentation). test/types-check.ts type-checks them in `npm test`,
// and test/exports.test.js checks that every runtime export is declared here and vice versa.

/** This package's version, which is the wire contract's (proto/VERSION): `"1.0.0"`. */
export declare const VERSION: string;
/** The protobuf package this client speaks: `"tooljail.v1"`. */
export declare const PROTOCOL: "tooljail.v1";
/** The packaged daemon's socket: `unix:///run/tooljail/tooljail.sock`. */
export declare const DEFAULT_TARGET: string;
/** Retries of an Execute or ExecuteBatch that got UNAVAILABLE, by default (2: 3 attempts). */
export declare const DEFAULT_RETRIES: number;
/** The pause before retry n (1, 2, ...) is n times this many milliseconds (500). */
export declare const RETRY_PAUSE_MS: number;
/** The default deadline of each call, in milliseconds (300 000). */
export declare const DEFAULT_TIMEOUT_MS: number;
/** The folder holding `tooljail/v1/executor.proto` inside the installed package. */
export declare const PROTO_DIR: string;

// --- JSON ------------------------------------------------------------------------------------

/** A JSON value, as tool inputs and input schemas hold them. */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | JsonValue[]
  | { [key: string]: JsonValue };
/** A JSON object: a tool's input, a tool's input schema. */
export type JsonObject = { [key: string]: JsonValue };

/** A tool's input schema: a JSON Schema of an object (the Anthropic SDK's `InputSchema` fits). */
export interface InputSchema {
  type: "object";
  properties?: { [name: string]: JsonValue } | null;
  required?: string[] | null;
  [key: string]: JsonValue | undefined;
}

/** The image types a tool result may hold (those the Messages API takes). */
export type ImageMediaType = "image/jpeg" | "image/png" | "image/gif" | "image/webp";

// --- requests --------------------------------------------------------------------------------

/**
 * A tool_use block as the model wrote it: `{type: "tool_use", id, name, input}` from a Messages
 * API response (the SDK's `ToolUseBlock` fits). `id` may be left out for a call of your own: a
 * fresh one is made. `input` must be an object (missing: `{}`) of what JSON can carry.
 */
export interface ToolUseBlock {
  type?: string;
  id?: string;
  name: string;
  input?: unknown;
}

/**
 * A block of an assistant message's content (the SDK's content blocks fit): tool_use blocks
 * are run, blocks of any other type (text, thinking) are skipped.
 */
export type AssistantBlock = ToolUseBlock | { type: string };

/** A tool_use with everything filled in: what goes on the wire. */
export interface ToolUse {
  /** Opaque id, echoed as the result's `toolUseId`; the daemon runs one id at most once. */
  id: string;
  /** The tool's name (or one of its aliases). */
  name: string;
  input: Record<string, unknown>;
}

/** Options every call takes. */
export interface CallOptions {
  /** This call's deadline in milliseconds (default: the client's `timeoutMs`; 0: none). */
  timeoutMs?: number;
  /** Aborting cancels the call, which then rejects with a CancelledError. */
  signal?: AbortSignalLike;
}

/** The part of an AbortSignal the client uses (Node's and the DOM's both fit). */
export interface AbortSignalLike {
  readonly aborted: boolean;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

/** Options of `listTools` and `anthropicTools`. */
export interface ListToolsOptions extends CallOptions {
  /** The tools as the policy shows them in this session (default: the caller's default one). */
  sessionId?: string;
  /** Also the deferred tools (found through ToolSearch otherwise). */
  includeDeferred?: boolean;
}

/** Options of `execute` and `stream`. */
export interface ExecuteOptions extends CallOptions {
  /** The session to run in (default: the caller's default session). */
  sessionId?: string;
  /** The token of an ASK decision, once a person approved: resend the same tool_use with it. */
  approvalToken?: string;
  /** With an approval token: "once" (default) or "session". */
  approvalScope?: "once" | "session" | "";
  /** Calls of one turn sent one by one under one turn budget share this (any string). */
  turnId?: string;
  /**
   * How many times an UNAVAILABLE answer is retried with the same tool_use id, after 0.5 s, 1 s,
   * 1.5 s ... (default: the client's `retries`, 2; 0: never). The daemon runs an id once and
   * answers a resend from memory. `stream` does not retry.
   */
  retries?: number;
}

/** Options of `executeBatch` and `streamBatch`. */
export interface BatchOptions extends CallOptions {
  sessionId?: string;
  /** As for `execute`: the whole batch is resent with the same ids (`streamBatch`: none). */
  retries?: number;
}

/** Options of `openSession`. */
export interface OpenSessionOptions extends CallOptions {
  /** An existing directory to work in (the policy must allow it); default: a fresh one. */
  workspace?: string;
  /** Close the session after this many idle seconds (0: the daemon's default). */
  idleTtlS?: number;
  /** Permission mode: default, acceptEdits, plan, dontAsk or bypassPermissions. */
  mode?: SessionMode | "";
}

/** A session's permission mode. */
export type SessionMode = "default" | "acceptEdits" | "plan" | "dontAsk" | "bypassPermissions";

// --- answers ---------------------------------------------------------------------------------

/** A tool as ListTools offers it to this caller. */
export interface ToolDefinition {
  name: string;
  description: string;
  /** JSON Schema of the input (an object schema). */
  inputSchema: InputSchema;
  traits: ToolTraits;
  /** Not shown to the model up front: found through ToolSearch. */
  deferLoading: boolean;
  /** Older names still accepted. */
  aliases: string[];
  origin: ToolOrigin;
}

/** What a tool declares about itself. */
export interface ToolTraits {
  readOnly: boolean;
  destructive: boolean;
  concurrencySafe: boolean;
  /** Runs in a disposable container rather than on the daemon's host. */
  sandboxed: boolean;
  /** The tool's result budget in characters. */
  maxResultChars: number;
}

/** Where a tool comes from. */
export interface ToolOrigin {
  /** "builtin", "operator" or "mcp". */
  kind: string;
  /** For an mcp tool: the server's configured name. */
  server: string;
  /** Whether the tool's own claims (its traits) were believed. */
  trusted: boolean;
}

/** A tool as the Messages API takes it (`tools: [...]`), exactly as the daemon wrote it. */
export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: InputSchema;
  /** Set when the whole schema fits strict mode. */
  strict?: boolean;
  /** Set on deferred tools (with `includeDeferred`). */
  defer_loading?: boolean;
}

/** A text block of a tool result. */
export interface TextContent {
  type: "text";
  text: string;
}

/** An image block of a tool result. */
export interface ImageContent {
  type: "image";
  mediaType: ImageMediaType;
  /** The image's bytes (a Buffer). */
  data: Uint8Array;
}

/** A block of a tool result's content. */
export type ContentBlock = TextContent | ImageContent;

/**
 * What the policy decided. `outcome` is "" when the policy was never asked (an unknown tool, an
 * invalid input: the result says what was wrong).
 */
export interface Decision {
  outcome: Outcome;
  /** Why, in words meant for the model (a denial's reasons are also in the result's text). */
  reasons: string[];
  decisionId: string;
  /** The git revision of the policy that decided. */
  policyRevision: string;
  /** Set when outcome is "ASK": resend the same tool_use with it once a person approved. */
  approvalToken: string;
}

/** A policy decision's outcome ("" when none was made). */
export type Outcome = "ALLOW" | "DENY" | "ASK" | "";

/** How the call ran. */
export interface ExecutionReport {
  sandboxed: boolean;
  sandboxId: string;
  exitCode: number;
  timedOut: boolean;
  oomKilled: boolean;
  durationMs: number;
  /** The result was cut to its budget; `originalChars` is its size before the cut. */
  truncated: boolean;
  originalChars: number;
  /** The answer was remembered from an earlier call with the same id: nothing ran now. */
  replayed: boolean;
  /** Where a result over its budget was kept whole (readable with Read in the session). */
  keptOutput: string;
}

/** The daemon's answer to one tool_use. `toToolResultBlock(result)` is what the model gets. */
export interface ExecuteResult {
  toolUseId: string;
  content: ContentBlock[];
  /** A denied, invalid or failed call: the text says what happened and what to do next. */
  isError: boolean;
  /** Every text block of the content, joined. */
  text: string;
  decision: Decision;
  report: ExecutionReport;
  /** One line for people ("Read 120 lines of src/app.py"), not for the model. */
  summary: string;
  /** What hooks said for the user (show them; keep them out of the conversation). */
  systemMessages: string[];
  /** The daemon's own `tool_result` JSON; `toToolResultBlock` gives the same object. */
  toolResultJson: string;
}

/** Live progress of a running call (for people, never for the model). */
export interface ProgressEvent {
  type: "progress";
  toolUseId: string;
  /** A chunk of output as it was produced (Bash). */
  output: string;
  /** Files scanned so far (Grep, Glob). */
  filesScanned: number;
  message: string;
  /** Output chunks dropped because the reader was too slow. */
  droppedChunks: number;
}

/** A call's answer, in a stream. */
export interface ResultEvent {
  type: "result";
  result: ExecuteResult;
}

/** What PostToolBatch hooks said at the end of a turn (ExecuteTurn only; not sent otherwise). */
export interface BatchEndEvent {
  type: "batchEnd";
  additionalContext: string[];
  systemMessages: string[];
}

/** An event of `stream` or `streamBatch`. */
export type StreamEvent = ProgressEvent | ResultEvent | BatchEndEvent;

/** A session: a workspace, and the state of the calls in it. */
export interface Session {
  id: string;
  /** Absolute path: file paths in tool inputs are absolute paths inside it. */
  workspace: string;
  idleTtlS: number;
  mode: string;
}

/** What `closeSession` did. */
export interface ClosedSession {
  /** Calls that were still running and were cancelled. */
  cancelledCalls: number;
  workspaceDeleted: boolean;
}

/** A call the policy asked a person about. */
export interface PendingApproval {
  /** Also the approval token's id. */
  approvalId: string;
  /** Who made the call. */
  principal: string;
  sessionId: string;
  toolUseId: string;
  tool: string;
  /** The exact input as JSON ("" when too large to review: `inputChars` says how large). */
  inputJson: string;
  inputChars: number;
  reasons: string[];
  /** Unix seconds. */
  askedAt: number;
  expiresAt: number;
  /** "pending", "approved" or "denied". */
  state: string;
  decidedBy: string;
  scope: string;
  note: string;
}

/** An approval granted for the rest of a session. */
export interface Grant {
  tool: string;
  /** A command prefix (Bash) or a path pattern (file tools). */
  pattern: string;
  approvedBy: string;
  /** Unix seconds. */
  grantedAt: number;
}

/** The daemon's health. */
export interface DaemonStatus {
  version: string;
  policyRevision: string;
  opaHealthy: boolean;
  dockerHealthy: boolean;
  /** Warm containers ready. */
  poolReady: number;
  /** Calls running now. */
  inFlight: number;
  sessions: number;
  instanceId: string;
  /** The principal this request was made as. */
  principal: string;
}

/** What a policy reload did. */
export interface ReloadResult {
  /** The revision now serving (unchanged when refused). */
  policyRevision: string;
  reloaded: boolean;
  /** Why the reload was refused. */
  error: string;
}

/** The exact Anthropic `tool_result` block. */
export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content: Array<
    | { type: "text"; text: string }
    | { type: "image"; source: { type: "base64"; media_type: ImageMediaType; data: string } }
  >;
  is_error: boolean;
}

/** The user message answering a turn's tool_use blocks. */
export interface ToolResultMessage {
  role: "user";
  content: ToolResultBlock[];
}

// --- the client ------------------------------------------------------------------------------

/** TLS for a TCP daemon: roots (`ca`) and, for mTLS, a client certificate and key. */
export interface TlsOptions {
  /** A path to a PEM file, or the PEM bytes. Default: the system's roots. */
  ca?: string | Uint8Array;
  cert?: string | Uint8Array;
  key?: string | Uint8Array;
}

/** How to reach the daemon. */
export interface ClientOptions {
  /** `unix:///path`, `unix:relative`, or `host:port` (default: TOOLJAIL_TARGET, else DEFAULT_TARGET). */
  target?: string;
  /** Bearer token, sent as `authorization: Bearer <token>` (default: TOOLJAIL_TOKEN). */
  token?: string;
  /** TLS (`true`: with the system's roots); default: plaintext, as on the Unix socket. */
  tls?: boolean | TlsOptions;
  /** Default deadline of each call in milliseconds (default 300 000; 0: none). */
  timeoutMs?: number;
  /**
   * Default retries of an UNAVAILABLE Execute or ExecuteBatch, with the same ids (default
   * DEFAULT_RETRIES, 2; 0: none). The daemon keeps answers in memory: one that restarted has
   * forgotten them, so a resend of a call made before the restart runs it again.
   */
  retries?: number;
  /** @grpc/grpc-js channel options ("grpc.max_reconnect_backoff_ms", ...). */
  channelOptions?: Record<string, string | number>;
  /** Where TOOLJAIL_TARGET and TOOLJAIL_TOKEN are read (default: process.env). */
  env?: Record<string, string | undefined>;
}

/** A connection as resolved from options and environment. */
export interface ResolvedConnection {
  /** The target as gRPC takes it. */
  target: string;
  token: string;
  tls: false | { ca?: Uint8Array; cert?: Uint8Array; key?: Uint8Array };
}

/**
 * A connection to a tooljail daemon: one async method per RPC, plain objects in and out. RPC
 * failures reject with a {@link TooljailError} subclass; a tool call that was refused or failed
 * resolves to a result whose `isError` is set.
 *
 * @example
 * const jail = new Client();                       // TOOLJAIL_TARGET, TOOLJAIL_TOKEN
 * const result = await jail.execute({ name: "Read", input: { file_path: "/srv/ws/a.txt" } });
 * messages.push(toolResultMessage([result]));
 */
export declare class Client {
  /** Options first; a missing target or token is read from the environment, then defaulted. */
  constructor(options?: ClientOptions);
  /** A client configured from `env` only (TOOLJAIL_TARGET, TOOLJAIL_TOKEN); `options` adds the rest. */
  static fromEnv(
    env?: Record<string, string | undefined>,
    options?: Omit<ClientOptions, "target" | "token" | "env">,
  ): Client;
  /** The target in use, as gRPC takes it. */
  readonly target: string;
  /** Closes the channel. */
  close(): void;

  /** The tools this caller may use, as the policy shows them. */
  listTools(options?: ListToolsOptions): Promise<ToolDefinition[]>;
  /** The tools for the Messages API's `tools` parameter. */
  anthropicTools(options?: ListToolsOptions): Promise<AnthropicTool[]>;

  /** Runs one tool_use; UNAVAILABLE is retried with the same id (see `ExecuteOptions.retries`). */
  execute(toolUse: ToolUseBlock, options?: ExecuteOptions): Promise<ExecuteResult>;
  /**
   * The tool_use blocks of one assistant turn (pass the message's whole `content`: other blocks
   * are skipped), resolved in request order, which is checked (an InternalError otherwise).
   */
  executeBatch(blocks: Iterable<AssistantBlock>, options?: BatchOptions): Promise<ExecuteResult[]>;
  /** One tool_use with its live progress events, then its result event. */
  stream(
    toolUse: ToolUseBlock,
    options?: ExecuteOptions,
  ): AsyncGenerator<StreamEvent, void, undefined>;
  /** A batch with each call's progress between the results (in request order). */
  streamBatch(
    blocks: Iterable<AssistantBlock>,
    options?: BatchOptions,
  ): AsyncGenerator<StreamEvent, void, undefined>;

  /** A session over a workspace the policy allows, or over a fresh directory. */
  openSession(options?: OpenSessionOptions): Promise<Session>;
  /** Closes a session: its running calls are cancelled and its containers removed. */
  closeSession(
    sessionId: string,
    options?: CallOptions & { deleteWorkspace?: boolean },
  ): Promise<ClosedSession>;

  /** The daemon's health (admin principals only: PermissionDeniedError otherwise). */
  status(options?: CallOptions): Promise<DaemonStatus>;
  /** Changes a session's permission mode (admin principals only). */
  setSessionMode(sessionId: string, mode: SessionMode, options?: CallOptions): Promise<Session>;
  /** The session-scoped approvals of a session (admin principals only). */
  listGrants(sessionId: string, options?: CallOptions): Promise<Grant[]>;
  /** Re-reads the policy folder (admin principals only). */
  reloadPolicies(options?: CallOptions): Promise<ReloadResult>;

  /** The asks waiting for a person that this caller may answer (the policy decides who). */
  listPendingApprovals(options?: CallOptions): Promise<PendingApproval[]>;
  /** Approves an ask: its caller's resend with the approval token then runs. */
  approve(
    approvalId: string,
    options?: CallOptions & { scope?: "once" | "session"; note?: string },
  ): Promise<PendingApproval>;
  /** Denies an ask: its caller's resend is denied, with the note shown to the model. */
  deny(approvalId: string, options?: CallOptions & { note?: string }): Promise<PendingApproval>;
}

/** The connection `new Client(options)` would use (for checks and messages). */
export declare function resolveConnection(
  options?: Pick<ClientOptions, "target" | "token" | "tls">,
  env?: Record<string, string | undefined>,
): ResolvedConnection;

// --- helpers ---------------------------------------------------------------------------------

/** A fresh tool_use id: `toolu_` and 24 hex digits. */
export declare function newToolUseId(): string;
/** A tool_use block with its id (fresh when missing) and input (`{}` when missing) filled in. */
export declare function toolUse(block: ToolUseBlock): ToolUse;
/** The tool_use blocks among content blocks (blocks of another type are skipped). */
export declare function toolUses(blocks: Iterable<AssistantBlock>): ToolUse[];
/** The exact Anthropic `tool_result` block for a result. */
export declare function toToolResultBlock(
  result: Pick<ExecuteResult, "toolUseId" | "content" | "isError">,
): ToolResultBlock;
/** The user message of tool_result blocks answering a turn, in the results' order. */
export declare function toolResultMessage(
  results: ReadonlyArray<Pick<ExecuteResult, "toolUseId" | "content" | "isError">>,
): ToolResultMessage;

// --- errors ----------------------------------------------------------------------------------

/** gRPC status codes by name. */
export declare const Status: Readonly<{
  OK: 0;
  CANCELLED: 1;
  UNKNOWN: 2;
  INVALID_ARGUMENT: 3;
  DEADLINE_EXCEEDED: 4;
  NOT_FOUND: 5;
  ALREADY_EXISTS: 6;
  PERMISSION_DENIED: 7;
  RESOURCE_EXHAUSTED: 8;
  FAILED_PRECONDITION: 9;
  ABORTED: 10;
  OUT_OF_RANGE: 11;
  UNIMPLEMENTED: 12;
  INTERNAL: 13;
  UNAVAILABLE: 14;
  DATA_LOSS: 15;
  UNAUTHENTICATED: 16;
}>;

/** Any failure of a call to the daemon (the RPC, not the tool). */
export declare class TooljailError extends Error {
  /** The status code the class stands for. */
  static readonly code: number;
  constructor(
    details: string,
    options?: { code?: number; metadata?: Record<string, string | Uint8Array>; cause?: unknown },
  );
  /** The gRPC status code. */
  readonly code: number;
  /** Its name: "UNAVAILABLE", "INVALID_ARGUMENT", ... */
  readonly codeName: string;
  /** The daemon's message. */
  readonly details: string;
  /** The trailing metadata the daemon sent. */
  readonly metadata: Record<string, string | Uint8Array>;
}
/** The call was cancelled (its signal aborted, or the daemon cancelled it). */
export declare class CancelledError extends TooljailError {}
/** The request was malformed: the details say what to fix. */
export declare class InvalidArgumentError extends TooljailError {}
/** The deadline passed before the answer came. */
export declare class DeadlineExceededError extends TooljailError {}
/** The session or approval does not exist, or is not the caller's. */
export declare class NotFoundError extends TooljailError {}
/** The caller may not do this (an Admin RPC without being an admin, for one). */
export declare class PermissionDeniedError extends TooljailError {}
/** The daemon is at a limit: retry later. */
export declare class ResourceExhaustedError extends TooljailError {}
/** The daemon is not in a state to do this now. */
export declare class FailedPreconditionError extends TooljailError {}
/** The daemon does not implement this RPC. */
export declare class UnimplementedError extends TooljailError {}
/** The daemon failed, or answered against the contract (a batch out of order). */
export declare class InternalError extends TooljailError {}
/** The daemon could not be reached, is stopping, or its policy engine is down (retryable). */
export declare class UnavailableError extends TooljailError {}
/** No valid credentials. */
export declare class UnauthenticatedError extends TooljailError {}
/** The TooljailError for a failed gRPC call; any other error is returned unchanged. */
export declare function fromGrpcError(error: unknown): unknown;
