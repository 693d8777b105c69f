package tooljail

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorsMapFromStatuses(t *testing.T) {
	for code, sentinel := range map[codes.Code]error{
		codes.InvalidArgument:   ErrInvalidArgument,
		codes.NotFound:          ErrNotFound,
		codes.Unauthenticated:   ErrUnauthenticated,
		codes.PermissionDenied:  ErrPermissionDenied,
		codes.ResourceExhausted: ErrResourceExhausted,
		codes.Unavailable:       ErrUnavailable,
		codes.DeadlineExceeded:  ErrDeadlineExceeded,
		codes.Canceled:          ErrCanceled,
	} {
		err := rpcError("Execute", status.Error(code, "the daemon says why"))
		if !errors.Is(err, sentinel) {
			t.Errorf("%s: %v is not %v", code, err, sentinel)
		}
		for other := range sentinelSet() {
			if other != sentinel && errors.Is(err, other) {
				t.Errorf("%s: %v also matches %v", code, err, other)
			}
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != code || e.Op != "Execute" || e.Message != "the daemon says why" {
			t.Errorf("%s: errors.As gave %+v", code, e)
		}
		if status.Code(err) != code {
			t.Errorf("%s: status.Code(err) = %s", code, status.Code(err))
		}
	}
}

func sentinelSet() map[error]bool {
	set := map[error]bool{}
	for _, s := range sentinels {
		set[s] = true
	}
	return set
}

func TestErrorMessageNamesTheCall(t *testing.T) {
	err := rpcError("ListTools", status.Error(codes.Unauthenticated, "the bearer token is not valid for this daemon"))
	want := "tooljail: ListTools: Unauthenticated: the bearer token is not valid for this daemon"
	if err.Error() != want {
		t.Errorf("%q, want %q", err.Error(), want)
	}
}

func TestContextErrorsMatch(t *testing.T) {
	deadline := rpcError("Execute", status.Error(codes.DeadlineExceeded, "too slow"))
	if !errors.Is(deadline, context.DeadlineExceeded) || errors.Is(deadline, context.Canceled) {
		t.Errorf("a DEADLINE_EXCEEDED error should match context.DeadlineExceeded only: %v", deadline)
	}
	// A context error that never became a status (the call did not start) maps all the same.
	canceled := rpcError("Execute", fmt.Errorf("before the call: %w", context.Canceled))
	if !errors.Is(canceled, ErrCanceled) || !errors.Is(canceled, context.Canceled) {
		t.Errorf("a cancelled context should be ErrCanceled: %v", canceled)
	}
}

func TestOtherErrorsAreUnknownAndMatchNoSentinel(t *testing.T) {
	err := rpcError("Status", errors.New("something odd"))
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.Unknown {
		t.Fatalf("got %#v", err)
	}
	for sentinel := range sentinelSet() {
		if errors.Is(err, sentinel) {
			t.Errorf("%v matches %v", err, sentinel)
		}
	}
	if rpcError("Status", nil) != nil {
		t.Error("no error must stay nil")
	}
}
