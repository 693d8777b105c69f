package tooljail

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinels for the gRPC statuses the daemon answers with; an [*Error] matches the one of its
// code with errors.Is. What the model did wrong is not here: a refused or failed call is a
// [Result] whose IsError is set.
var (
	// ErrInvalidArgument: the request was malformed (the message says what to fix), e.g. the
	// same tool_use id sent again with another input.
	ErrInvalidArgument = errors.New("tooljail: invalid argument")
	// ErrNotFound: the session or approval does not exist, or is not the caller's.
	ErrNotFound = errors.New("tooljail: not found")
	// ErrUnauthenticated: no valid credentials; a token or client certificate the daemon
	// accepts is needed.
	ErrUnauthenticated = errors.New("tooljail: unauthenticated")
	// ErrPermissionDenied: the caller may not do this (e.g. an Admin RPC without being an
	// admin principal).
	ErrPermissionDenied = errors.New("tooljail: permission denied")
	// ErrResourceExhausted: the daemon is at a limit (calls in flight, sessions, streams):
	// retry later.
	ErrResourceExhausted = errors.New("tooljail: resource exhausted")
	// ErrUnavailable: the daemon cannot be reached, is stopping, or its policy engine is down.
	// Sending the same tool_use (same id, same input) again is safe.
	ErrUnavailable = errors.New("tooljail: unavailable")
	// ErrDeadlineExceeded: the call's deadline passed before the answer came. It also matches
	// context.DeadlineExceeded.
	ErrDeadlineExceeded = errors.New("tooljail: deadline exceeded")
	// ErrCanceled: the call was cancelled by the caller. It also matches context.Canceled.
	ErrCanceled = errors.New("tooljail: canceled")
	// ErrProtocol: the daemon answered something this client cannot use (a batch answered out
	// of order, or with too few or too many results). Not an [*Error]: it wraps this sentinel.
	ErrProtocol = errors.New("tooljail: unexpected answer from the daemon")
)

var sentinels = map[codes.Code]error{
	codes.InvalidArgument:   ErrInvalidArgument,
	codes.NotFound:          ErrNotFound,
	codes.Unauthenticated:   ErrUnauthenticated,
	codes.PermissionDenied:  ErrPermissionDenied,
	codes.ResourceExhausted: ErrResourceExhausted,
	codes.Unavailable:       ErrUnavailable,
	codes.DeadlineExceeded:  ErrDeadlineExceeded,
	codes.Canceled:          ErrCanceled,
}

// Error is a failed call to the daemon (the RPC itself, not the tool).
type Error struct {
	// Op is the RPC that failed, e.g. "Execute".
	Op string
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the daemon's (or gRPC's) explanation.
	Message string
}

// Error describes the failure as "tooljail: <op>: <code>: <message>".
func (e *Error) Error() string {
	return fmt.Sprintf("tooljail: %s: %s: %s", e.Op, e.Code, e.Message)
}

// Is reports whether target is the sentinel of e's code (or the context error of a deadline or
// a cancellation).
func (e *Error) Is(target error) bool {
	if sentinel, ok := sentinels[e.Code]; ok && target == sentinel {
		return true
	}
	switch e.Code {
	case codes.DeadlineExceeded:
		return target == context.DeadlineExceeded
	case codes.Canceled:
		return target == context.Canceled
	}
	return false
}

// GRPCStatus gives the status back, so status.Code(err) and status.FromError work on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	return status.New(e.Code, e.Message)
}

// rpcError converts the error of a generated stub's call into an *Error naming op; nil stays nil.
func rpcError(op string, err error) error {
	if err == nil {
		return nil
	}
	var own *Error
	if errors.As(err, &own) {
		return own
	}
	s, ok := status.FromError(err)
	if !ok {
		// Not a status: a context error raised before the call started, or a local failure.
		s = status.FromContextError(err)
	}
	return &Error{Op: op, Code: s.Code(), Message: s.Message()}
}
