package tooljail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"

	tooljailv1 "github.com/tooljail/tooljail/clients/go/tooljailv1"
)

// Client is a connection to a tooljail daemon, safe for concurrent use. Make one with [New] or
// [FromEnv] and Close it when done.
type Client struct {
	conn       *grpc.ClientConn
	executor   tooljailv1.ExecutorClient
	admin      tooljailv1.AdminClient
	target     string
	timeout    time.Duration
	retries    int
	retryPause time.Duration
}

// New makes a client of the daemon at target: "unix:///path/to.sock" (the local socket: the
// caller's principal is its user) or "host:port" (TCP: with a token and/or TLS, see the options).
// It does not connect yet: the first call does, and an unreachable daemon is an [ErrUnavailable]
// error then.
func New(target string, options ...Option) (*Client, error) {
	if target == "" {
		return nil, errors.New("tooljail: no target: give unix:///path/to.sock or host:port")
	}
	s := settings{timeout: DefaultTimeout, retries: DefaultRetries, retryPause: DefaultRetryPause}
	for _, option := range options {
		if err := option(&s); err != nil {
			return nil, err
		}
	}
	if s.token != "" && s.tls == nil && !onThisMachine(target) {
		return nil, fmt.Errorf("tooljail: refusing to send the bearer token in clear to %s: "+
			"use TLS (WithCAFile), or reach the daemon on loopback or its Unix socket", target)
	}
	dial, err := s.dialOptions()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(grpcTarget(target), dial...)
	if err != nil {
		return nil, fmt.Errorf("tooljail: target %q: %w", target, err)
	}
	return &Client{
		conn:       conn,
		executor:   tooljailv1.NewExecutorClient(conn),
		admin:      tooljailv1.NewAdminClient(conn),
		target:     target,
		timeout:    s.timeout,
		retries:    s.retries,
		retryPause: s.retryPause,
	}, nil
}

// FromEnv makes a client of the daemon at $TOOLJAIL_TARGET ([DefaultTarget] when unset) with
// the bearer token in $TOOLJAIL_TOKEN, if any; options given here come after those.
func FromEnv(options ...Option) (*Client, error) {
	target := os.Getenv(TargetVariable)
	if target == "" {
		target = DefaultTarget
	}
	return New(target, append([]Option{WithToken(os.Getenv(TokenVariable))}, options...)...)
}

// Close closes the connection; calls still running fail with [ErrCanceled].
func (c *Client) Close() error {
	return c.conn.Close()
}

// Target is the address the client was made with.
func (c *Client) Target() string {
	return c.target
}

// Executor is the generated Executor client on this connection (ExecuteTurn, raw messages).
func (c *Client) Executor() tooljailv1.ExecutorClient {
	return c.executor
}

// Admin is the generated Admin client on this connection.
func (c *Client) Admin() tooljailv1.AdminClient {
	return c.admin
}

// deadline bounds one call by the client's timeout (the context's own deadline still holds).
func (c *Client) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// unary runs one unary RPC under the client's deadline and maps its error.
func unary[Req, Resp any](ctx context.Context, c *Client, op string, method func(context.Context, Req, ...grpc.CallOption) (Resp, error), request Req) (Resp, error) {
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	response, err := method(ctx, request)
	return response, rpcError(op, err)
}

// ListTools is the tools this caller may use (in the session of [WithSession]), as the policy
// shows them; [WithDeferred] adds deferred ones.
func (c *Client) ListTools(ctx context.Context, options ...CallOption) ([]ToolDefinition, error) {
	o := callOf(options)
	request := &tooljailv1.ListToolsRequest{SessionId: o.session, IncludeDeferred: o.deferred}
	response, err := unary(ctx, c, "ListTools", c.executor.ListTools, request)
	if err != nil {
		return nil, err
	}
	return toolDefinitions(response), nil
}

// AnthropicTools is the tools as the Messages API takes them in `tools`: one object per tool with
// name, description and input_schema (and strict, where the schema allows it).
func (c *Client) AnthropicTools(ctx context.Context, options ...CallOption) ([]map[string]any, error) {
	tools, err := c.ListTools(ctx, options...)
	if err != nil {
		return nil, err
	}
	anthropic := make([]map[string]any, 0, len(tools))
	for _, tool := range tools {
		anthropic = append(anthropic, tool.Anthropic)
	}
	return anthropic, nil
}

// Execute runs one tool_use. A refused, invalid or failed call is not an error: it is a Result
// whose IsError is set, with the decision saying why. The error is for the RPC itself (see
// [Error]).
//
// A call that could not reach the daemon ([ErrUnavailable]) is sent again with the same id (and
// a fresh id made here when use.ID was empty), up to the client's retries (see [WithRetries]),
// while ctx lasts.
func (c *Client) Execute(ctx context.Context, use ToolUse, options ...CallOption) (*Result, error) {
	message, err := toolUseProto("Execute", use)
	if err != nil {
		return nil, err
	}
	request := executeRequest(message, options)
	for attempt := 0; ; attempt++ {
		response, err := unary(ctx, c, "Execute", c.executor.Execute, request)
		if err == nil {
			return result(response), nil
		}
		if !errors.Is(err, ErrUnavailable) || attempt >= c.retries {
			return nil, err
		}
		pause := time.NewTimer(c.retryPause * time.Duration(attempt+1))
		select {
		case <-ctx.Done():
			pause.Stop()
			return nil, err
		case <-pause.C:
		}
	}
}

// ExecuteBatch runs the tool_use blocks of one assistant turn as the reference runtime does
// (concurrency-safe ones side by side, any other alone) and answers in request order, checked
// here: an answer out of order is an [ErrProtocol] error. Blocks without an id get a fresh one.
// It is not retried.
func (c *Client) ExecuteBatch(ctx context.Context, uses []ToolUse, options ...CallOption) ([]*Result, error) {
	const op = "ExecuteBatch"
	request, err := batchRequest(op, uses, options)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	stream, err := c.executor.ExecuteBatch(ctx, request)
	if err != nil {
		return nil, rpcError(op, err)
	}
	return receive(stream, &collector{op: op, uses: request.GetToolUses()},
		func(r *tooljailv1.ExecuteResponse) *tooljailv1.ExecuteEvent {
			return &tooljailv1.ExecuteEvent{Kind: &tooljailv1.ExecuteEvent_Response{Response: r}}
		})
}

// Stream runs one tool_use like [Client.Execute], calling onProgress (when not nil) with its live
// progress (output chunks as a command prints them, files scanned) before the result comes. It is
// not retried.
func (c *Client) Stream(ctx context.Context, use ToolUse, onProgress func(Progress), options ...CallOption) (*Result, error) {
	const op = "ExecuteStream"
	message, err := toolUseProto(op, use)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	stream, err := c.executor.ExecuteStream(ctx, executeRequest(message, options))
	if err != nil {
		return nil, rpcError(op, err)
	}
	collect := &collector{op: op, uses: []*tooljailv1.ToolUse{message}, onProgress: onProgress}
	results, err := receive(stream, collect, sameEvent)
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// StreamBatch runs a batch like [Client.ExecuteBatch], calling onProgress (when not nil) with
// every call's progress (Progress.ToolUseID says whose) as it comes between the ordered results.
func (c *Client) StreamBatch(ctx context.Context, uses []ToolUse, onProgress func(Progress), options ...CallOption) ([]*Result, error) {
	const op = "ExecuteBatchStream"
	request, err := batchRequest(op, uses, options)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.deadline(ctx)
	defer cancel()
	stream, err := c.executor.ExecuteBatchStream(ctx, request)
	if err != nil {
		return nil, rpcError(op, err)
	}
	collect := &collector{op: op, uses: request.GetToolUses(), onProgress: onProgress}
	return receive(stream, collect, sameEvent)
}

func executeRequest(use *tooljailv1.ToolUse, options []CallOption) *tooljailv1.ExecuteRequest {
	o := callOf(options)
	return &tooljailv1.ExecuteRequest{
		SessionId:     o.session,
		ToolUse:       use,
		ApprovalToken: o.approvalToken,
		ApprovalScope: o.approvalScope,
		TurnId:        o.turnID,
	}
}

func batchRequest(op string, uses []ToolUse, options []CallOption) (*tooljailv1.ExecuteBatchRequest, error) {
	messages, err := toolUsesProto(op, uses)
	if err != nil {
		return nil, err
	}
	return &tooljailv1.ExecuteBatchRequest{SessionId: callOf(options).session, ToolUses: messages}, nil
}

func sameEvent(e *tooljailv1.ExecuteEvent) *tooljailv1.ExecuteEvent { return e }

// receive reads a server stream of ExecuteResponse (ExecuteBatch) or ExecuteEvent (the others),
// each message seen as an event, until it ends.
func receive[T any](stream interface{ Recv() (T, error) }, collect *collector, event func(T) *tooljailv1.ExecuteEvent) ([]*Result, error) {
	for {
		message, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return collect.done()
		}
		if err != nil {
			return nil, rpcError(collect.op, err)
		}
		if err := collect.add(event(message)); err != nil {
			return nil, err
		}
	}
}

// collector checks a stream of answers against the requests: one each, in their order.
type collector struct {
	op         string
	uses       []*tooljailv1.ToolUse
	onProgress func(Progress)
	results    []*Result
}

func (c *collector) add(event *tooljailv1.ExecuteEvent) error {
	switch kind := event.GetKind().(type) {
	case *tooljailv1.ExecuteEvent_Progress:
		if c.onProgress != nil {
			c.onProgress(progress(kind.Progress))
		}
	case *tooljailv1.ExecuteEvent_Response:
		i := len(c.results)
		if i >= len(c.uses) {
			return fmt.Errorf("%w: %s sent more results than the %d calls", ErrProtocol, c.op, len(c.uses))
		}
		answer := result(kind.Response)
		if want := c.uses[i].GetId(); answer.ToolUseID != want {
			return fmt.Errorf("%w: %s result %d answers %s, want %s (results come in request order)",
				ErrProtocol, c.op, i+1, answer.ToolUseID, want)
		}
		c.results = append(c.results, answer)
	}
	return nil
}

func (c *collector) done() ([]*Result, error) {
	if len(c.results) != len(c.uses) {
		return nil, fmt.Errorf("%w: %s ended after %d of %d results", ErrProtocol, c.op, len(c.results), len(c.uses))
	}
	return c.results, nil
}

// OpenSession opens a session: over request.Workspace (when the policy allows it) or a fresh
// directory.
func (c *Client) OpenSession(ctx context.Context, request SessionRequest) (*Session, error) {
	message := &tooljailv1.OpenSessionRequest{
		Workspace: request.Workspace,
		IdleTtlS:  int64(request.IdleTTL / time.Second),
		Mode:      request.Mode,
	}
	response, err := unary(ctx, c, "OpenSession", c.executor.OpenSession, message)
	if err != nil {
		return nil, err
	}
	return session(response), nil
}

// CloseSession closes a session: its running calls are cancelled and its containers removed;
// deleteWorkspace also deletes a workspace the daemon made for it.
func (c *Client) CloseSession(ctx context.Context, sessionID string, deleteWorkspace bool) (SessionClosed, error) {
	request := &tooljailv1.CloseSessionRequest{SessionId: sessionID, DeleteWorkspace: deleteWorkspace}
	response, err := unary(ctx, c, "CloseSession", c.executor.CloseSession, request)
	if err != nil {
		return SessionClosed{}, err
	}
	return SessionClosed{
		CancelledCalls:   int(response.GetCancelledCalls()),
		WorkspaceDeleted: response.GetWorkspaceDeleted(),
	}, nil
}
