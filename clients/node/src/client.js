// The client: one object per daemon, one async method per RPC, plain objects in and out.
//
// Execute is idempotent by its tool_use id: the daemon runs a given id once and answers a resend
// with the first answer (from memory: a restarted daemon has forgotten), so `execute` and
// `executeBatch` retry a call that could not reach the daemon (UNAVAILABLE) with the same ids,
// and so may you.

import {
  eventFromWire,
  grantFromWire,
  pendingApprovalFromWire,
  resultFromWire,
  sessionFromWire,
  statusFromWire,
  toolDefinitionFromWire,
  toolUse,
  toolUses,
  toolUseToWire,
} from "./convert.js";
import { callMetadata, channelCredentials, resolveConnection } from "./connection.js";
import { CancelledError, InternalError, UnavailableError, fromGrpcError } from "./errors.js";
import { services } from "./proto.js";

/** Retries of an Execute (or ExecuteBatch) that got UNAVAILABLE, by default: 3 attempts in all. */
export const DEFAULT_RETRIES = 2;
/** The pause before retry n (1, 2, ...) is n times this. */
export const RETRY_PAUSE_MS = 500;
/** The default deadline of each call. */
export const DEFAULT_TIMEOUT_MS = 300_000;

/**
 * A connection to a tooljail daemon. See index.d.ts for the option and result types.
 */
export class Client {
  #executor;
  #admin;
  #connection;
  #timeoutMs;
  #retries;

  /**
   * @param {object} [options] target, token, tls ({ca, cert, key}: paths or PEM bytes),
   *   timeoutMs (per call; 0 or Infinity: none), retries (of UNAVAILABLE, see execute),
   *   channelOptions (passed to @grpc/grpc-js). A missing target or token is read from
   *   TOOLJAIL_TARGET / TOOLJAIL_TOKEN (in `options.env`, else process.env), then defaulted.
   * @throws {TypeError} for cert without key (or the reverse) or a bad `retries`.
   */
  constructor(options = {}) {
    this.#connection = resolveConnection(options, options.env ?? process.env);
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#retries = checkedRetries(options.retries ?? DEFAULT_RETRIES);
    const { Executor, Admin } = services();
    const credentials = channelCredentials(this.#connection);
    const channelOptions = options.channelOptions ?? {};
    this.#executor = new Executor(this.#connection.target, credentials, channelOptions);
    // One channel for both services.
    this.#admin = new Admin(this.#connection.target, credentials, {
      ...channelOptions,
      channelOverride: this.#executor.getChannel(),
    });
  }

  /**
   * A client configured from the environment only: TOOLJAIL_TARGET (default
   * unix:///run/tooljail/tooljail.sock) and TOOLJAIL_TOKEN.
   *
   * @param {Record<string, string | undefined>} [env] process.env by default.
   * @param {object} [options] Everything but target and token (timeoutMs, tls, channelOptions).
   * @returns {Client}
   */
  static fromEnv(env = process.env, options = {}) {
    const { target: _target, token: _token, ...rest } = options;
    return new Client({ ...rest, env });
  }

  /** The target this client talks to, as given to gRPC (`unix:///...` or host:port). */
  get target() {
    return this.#connection.target;
  }

  /** Closes the channel; calls still running fail with CANCELLED or UNAVAILABLE. */
  close() {
    this.#executor.close();
  }

  // --- tools ----------------------------------------------------------------------------------

  /** The tools this caller may use (in the session), as the policy shows them. */
  async listTools({ sessionId = "", includeDeferred = false, ...call } = {}) {
    const response = await this.#listTools(sessionId, includeDeferred, call);
    return response.tools.map(toolDefinitionFromWire);
  }

  /** The tools as the Messages API takes them (`tools: [...]`), exactly as the daemon wrote them. */
  async anthropicTools({ sessionId = "", includeDeferred = false, ...call } = {}) {
    const response = await this.#listTools(sessionId, includeDeferred, call);
    if (response.toolsJson) return JSON.parse(response.toolsJson);
    return response.tools.map(toolDefinitionFromWire).map((tool) => ({
      name: tool.name,
      description: tool.description,
      input_schema: tool.inputSchema,
    }));
  }

  #listTools(sessionId, includeDeferred, call) {
    return this.#unary(this.#executor, "listTools", { sessionId, includeDeferred }, call);
  }

  // --- calls ----------------------------------------------------------------------------------

  /**
   * Runs one tool_use. A refused or failed call resolves (its `isError` is set); only an RPC
   * failure rejects, with a TooljailError. UNAVAILABLE is retried `retries` times with the same
   * tool_use id, after 0.5 s, 1 s, ...: a running daemon runs the id at most once.
   */
  async execute(block, options = {}) {
    const request = executeRequest(block, options);
    return this.#retrying(options, async () =>
      resultFromWire(await this.#unary(this.#executor, "execute", request, options)),
    );
  }

  /**
   * The tool_use blocks of one assistant turn (other blocks of `content` are skipped), run as
   * the daemon schedules a turn, resolved in request order (checked). Retried as `execute` is.
   */
  async executeBatch(blocks, options = {}) {
    const uses = toolUses(blocks);
    if (uses.length === 0) return [];
    const request = { sessionId: options.sessionId ?? "", toolUses: uses.map(toolUseToWire) };
    return this.#retrying(options, async () => {
      const results = [];
      const call = this.#executor.executeBatch(
        request,
        this.#metadata(),
        this.#callOptions(options),
      );
      for await (const response of this.#messages(call, options.signal)) {
        results.push(inOrder(resultFromWire(response), uses, results.length));
      }
      if (results.length !== uses.length) {
        throw new InternalError(
          `ExecuteBatch ended after ${results.length} of ${uses.length} results`,
        );
      }
      return results;
    });
  }

  /**
   * One tool_use with its live progress: `{type: "progress", ...}` events while it runs, then
   * one `{type: "result", result}`. Not retried (progress already shown would repeat).
   */
  async *stream(block, options = {}) {
    const request = executeRequest(block, options);
    const call = this.#executor.executeStream(
      request,
      this.#metadata(),
      this.#callOptions(options),
    );
    yield* this.#events(call, options.signal);
  }

  /**
   * A batch with every call's progress between the results, which still come in request order
   * (`progress.toolUseId` says whose progress it is).
   */
  async *streamBatch(blocks, options = {}) {
    const uses = toolUses(blocks);
    if (uses.length === 0) return;
    const request = { sessionId: options.sessionId ?? "", toolUses: uses.map(toolUseToWire) };
    const call = this.#executor.executeBatchStream(
      request,
      this.#metadata(),
      this.#callOptions(options),
    );
    let answered = 0;
    for await (const event of this.#events(call, options.signal)) {
      if (event.type === "result") inOrder(event.result, uses, answered++);
      yield event;
    }
  }

  // --- sessions -------------------------------------------------------------------------------

  /** A session over `workspace` (when the policy allows it), or over a fresh directory. */
  async openSession({ workspace = "", idleTtlS = 0, mode = "", ...call } = {}) {
    const request = { workspace, idleTtlS, mode };
    return sessionFromWire(await this.#unary(this.#executor, "openSession", request, call));
  }

  /** Closes a session: its running calls are cancelled, its containers removed. */
  async closeSession(sessionId, { deleteWorkspace = false, ...call } = {}) {
    const request = { sessionId, deleteWorkspace };
    const closed = await this.#unary(this.#executor, "closeSession", request, call);
    return {
      cancelledCalls: closed.cancelledCalls ?? 0,
      workspaceDeleted: Boolean(closed.workspaceDeleted),
    };
  }

  // --- admin: status, modes, grants, policies (admin principals only) -------------------------

  /** The daemon's health: version, policy revision, OPA and Docker, pool, sessions. */
  async status(call = {}) {
    return statusFromWire(await this.#unary(this.#admin, "status", {}, call));
  }

  /** Changes a session's permission mode (default, acceptEdits, plan, dontAsk, bypassPermissions). */
  async setSessionMode(sessionId, mode, call = {}) {
    return sessionFromWire(
      await this.#unary(this.#admin, "setSessionMode", { sessionId, mode }, call),
    );
  }

  /** The approvals granted for the rest of a session (approval scope "session"). */
  async listGrants(sessionId, call = {}) {
    const response = await this.#unary(this.#admin, "listGrants", { sessionId }, call);
    return response.grants.map(grantFromWire);
  }

  /** Re-reads the policy folder; a policy that fails to compile or test is refused. */
  async reloadPolicies(call = {}) {
    const response = await this.#unary(this.#admin, "reloadPolicies", {}, call);
    return {
      policyRevision: response.policyRevision ?? "",
      reloaded: Boolean(response.reloaded),
      error: response.error ?? "",
    };
  }

  // --- approvals (whoever the policy lets answer) ---------------------------------------------

  /** The asks waiting for a person that this caller may answer. */
  async listPendingApprovals(call = {}) {
    const response = await this.#unary(this.#admin, "listPendingApprovals", {}, call);
    return response.approvals.map(pendingApprovalFromWire);
  }

  /** Approves an ask; its caller then resends the same tool_use with its approval token. */
  async approve(approvalId, { scope = "once", note = "", ...call } = {}) {
    const answered = await this.#unary(this.#admin, "approve", { approvalId, scope, note }, call);
    return pendingApprovalFromWire(answered);
  }

  /** Denies an ask; its caller's resend is denied, with the note shown to the model. */
  async deny(approvalId, { note = "", ...call } = {}) {
    const answered = await this.#unary(this.#admin, "deny", { approvalId, note }, call);
    return pendingApprovalFromWire(answered);
  }

  // --- plumbing -------------------------------------------------------------------------------

  #metadata() {
    return callMetadata(this.#connection);
  }

  #callOptions({ timeoutMs } = {}) {
    const ms = timeoutMs ?? this.#timeoutMs;
    return ms > 0 && Number.isFinite(ms) ? { deadline: new Date(Date.now() + ms) } : {};
  }

  #unary(stub, method, request, { signal, ...options } = {}) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(new CancelledError("the call was aborted before it was sent"));
        return;
      }
      const onAbort = () => call.cancel();
      const call = stub[method](
        request,
        this.#metadata(),
        this.#callOptions(options),
        (error, response) => {
          signal?.removeEventListener("abort", onAbort);
          if (error) reject(fromGrpcError(error));
          else resolve(response);
        },
      );
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  // The messages of a server stream; the call is cancelled if the reader stops early or aborts.
  async *#messages(call, signal) {
    if (signal?.aborted) call.cancel();
    const onAbort = () => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    let finished = false;
    try {
      for await (const message of call) yield message;
      finished = true;
    } catch (error) {
      finished = true;
      throw fromGrpcError(error);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      if (!finished) {
        call.on("error", () => {}); // the CANCELLED status nobody reads any more
        call.cancel();
      }
    }
  }

  async *#events(call, signal) {
    for await (const message of this.#messages(call, signal)) {
      const event = eventFromWire(message);
      if (event) yield event;
    }
  }

  async #retrying({ retries = this.#retries, signal } = {}, attempt) {
    checkedRetries(retries);
    for (let tried = 0; ; tried += 1) {
      try {
        return await attempt();
      } catch (error) {
        if (!(error instanceof UnavailableError) || tried >= retries || signal?.aborted) {
          throw error;
        }
        await pause(RETRY_PAUSE_MS * (tried + 1), signal);
      }
    }
  }
}

// An ExecuteRequest for one tool_use block (its id kept, a fresh one when it has none).
function executeRequest(
  block,
  { sessionId = "", approvalToken = "", approvalScope = "", turnId = "" },
) {
  return {
    sessionId,
    toolUse: toolUseToWire(toolUse(block)),
    approvalToken,
    approvalScope,
    turnId,
  };
}

// Checks that result n answers the n-th tool_use: a batch's answers come in request order.
function inOrder(result, uses, index) {
  const want = uses[index];
  if (!want) {
    throw new InternalError(`the daemon answered more than the ${uses.length} calls of the batch`);
  }
  if (result.toolUseId !== want.id) {
    throw new InternalError(
      `result ${index + 1} answers ${result.toolUseId}, want ${want.id}: a batch is answered in request order`,
    );
  }
  return result;
}

function checkedRetries(retries) {
  if (!Number.isInteger(retries) || retries < 0) {
    throw new TypeError(`retries must be a whole number, 0 or more, not ${retries}`);
  }
  return retries;
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
