package tooljail

// The client against an in-process fake Executor on an in-memory connection: retries, metadata,
// ordering checks and progress, with no daemon.

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	tooljailv1 "github.com/tooljail/tooljail/clients/go/tooljailv1"
)

type fakeExecutor struct {
	tooljailv1.UnimplementedExecutorServer

	mu sync.Mutex
	// failures is how many Execute calls fail with failCode before one answers.
	failures int
	failCode codes.Code
	ids      []string
	auth     []string
	// reorder answers a batch in reverse order; short leaves the last answer out.
	reorder, short bool
}

func (f *fakeExecutor) Execute(ctx context.Context, req *tooljailv1.ExecuteRequest) (*tooljailv1.ExecuteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, req.GetToolUse().GetId())
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth = append(f.auth, md.Get("authorization")...)
	if f.failures > 0 {
		f.failures--
		return nil, status.Error(f.failCode, "daemon restarting")
	}
	return answer(req.GetToolUse().GetId(), "ran "+req.GetToolUse().GetName()), nil
}

func (f *fakeExecutor) ExecuteBatch(req *tooljailv1.ExecuteBatchRequest, stream grpc.ServerStreamingServer[tooljailv1.ExecuteResponse]) error {
	uses := req.GetToolUses()
	if f.reorder {
		uses = []*tooljailv1.ToolUse{uses[1], uses[0]}
	}
	if f.short {
		uses = uses[:len(uses)-1]
	}
	for _, use := range uses {
		if err := stream.Send(answer(use.GetId(), use.GetName())); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeExecutor) ExecuteStream(req *tooljailv1.ExecuteRequest, stream grpc.ServerStreamingServer[tooljailv1.ExecuteEvent]) error {
	id := req.GetToolUse().GetId()
	for _, chunk := range []string{"line 1\n", "line 2\n"} {
		event := &tooljailv1.ExecuteEvent{Kind: &tooljailv1.ExecuteEvent_Progress{
			Progress: &tooljailv1.Progress{ToolUseId: id, Output: chunk},
		}}
		if err := stream.Send(event); err != nil {
			return err
		}
	}
	return stream.Send(&tooljailv1.ExecuteEvent{Kind: &tooljailv1.ExecuteEvent_Response{Response: answer(id, "line 1\nline 2\n")}})
}

func answer(id, text string) *tooljailv1.ExecuteResponse {
	return &tooljailv1.ExecuteResponse{
		Result: &tooljailv1.ToolResult{
			ToolUseId: id,
			Content:   []*tooljailv1.ContentBlock{{Kind: &tooljailv1.ContentBlock_Text{Text: &tooljailv1.TextBlock{Text: text}}}},
		},
		Decision: &tooljailv1.Decision{Outcome: tooljailv1.Outcome_ALLOW},
	}
}

// fakeClient serves fake in memory and returns a client of it.
func fakeClient(t *testing.T, fake *fakeExecutor, options ...Option) *Client {
	t.Helper()
	listener := bufconn.Listen(1 << 20)
	server := grpc.NewServer()
	tooljailv1.RegisterExecutorServer(server, fake)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	dialer := func(ctx context.Context, _ string) (net.Conn, error) { return listener.DialContext(ctx) }
	options = append([]Option{WithDialOptions(grpc.WithContextDialer(dialer))}, options...)
	// In memory; named as a loopback address, where a token may go in the clear.
	c, err := New("passthrough:///localhost:0", options...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestExecuteRetriesUnavailableWithTheSameID(t *testing.T) {
	fake := &fakeExecutor{failures: 2, failCode: codes.Unavailable}
	c := fakeClient(t, fake, WithRetries(2, time.Millisecond))
	r, err := c.Execute(context.Background(), ToolUse{Name: "Bash", Input: map[string]any{"command": "true"}})
	if err != nil {
		t.Fatalf("Execute after two UNAVAILABLE: %v", err)
	}
	if len(fake.ids) != 3 || fake.ids[0] != fake.ids[1] || fake.ids[1] != fake.ids[2] || fake.ids[0] != r.ToolUseID {
		t.Errorf("attempts sent ids %v, answer for %s: want one id three times", fake.ids, r.ToolUseID)
	}
}

func TestExecuteGivesUpAfterItsRetries(t *testing.T) {
	fake := &fakeExecutor{failures: 5, failCode: codes.Unavailable}
	c := fakeClient(t, fake, WithRetries(1, time.Millisecond))
	_, err := c.Execute(context.Background(), ToolUse{ID: "toolu_a", Name: "Bash"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if len(fake.ids) != 2 {
		t.Errorf("%d attempts, want 2 (one retry)", len(fake.ids))
	}
}

func TestExecuteDoesNotRetryOtherErrors(t *testing.T) {
	fake := &fakeExecutor{failures: 1, failCode: codes.ResourceExhausted}
	c := fakeClient(t, fake, WithRetries(3, time.Millisecond))
	_, err := c.Execute(context.Background(), ToolUse{ID: "toolu_b", Name: "Bash"})
	if !errors.Is(err, ErrResourceExhausted) || len(fake.ids) != 1 {
		t.Errorf("err = %v after %d attempts, want ErrResourceExhausted after 1", err, len(fake.ids))
	}
}

func TestExecuteRetryStopsWithTheContext(t *testing.T) {
	fake := &fakeExecutor{failures: 5, failCode: codes.Unavailable}
	c := fakeClient(t, fake, WithRetries(5, time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Execute(ctx, ToolUse{ID: "toolu_c", Name: "Bash"})
	if !errors.Is(err, ErrUnavailable) || time.Since(start) > 10*time.Second {
		t.Errorf("err = %v after %s", err, time.Since(start))
	}
}

func TestTokenIsSentAsBearer(t *testing.T) {
	fake := &fakeExecutor{}
	c := fakeClient(t, fake, WithToken("s3cret"))
	if _, err := c.Execute(context.Background(), ToolUse{ID: "toolu_d", Name: "LS"}); err != nil {
		t.Fatal(err)
	}
	if len(fake.auth) != 1 || fake.auth[0] != "Bearer s3cret" {
		t.Errorf("authorization metadata %q, want [Bearer s3cret]", fake.auth)
	}
	fake.auth = nil
	plain := fakeClient(t, fake)
	if _, err := plain.Execute(context.Background(), ToolUse{ID: "toolu_e", Name: "LS"}); err != nil {
		t.Fatal(err)
	}
	if len(fake.auth) != 0 {
		t.Errorf("no token given, yet authorization %q was sent", fake.auth)
	}
}

func TestExecuteBatchChecksOrder(t *testing.T) {
	uses := []ToolUse{{ID: "toolu_1", Name: "Bash"}, {ID: "toolu_2", Name: "Read"}}
	ordered, err := fakeClient(t, &fakeExecutor{}).ExecuteBatch(context.Background(), uses)
	if err != nil || len(ordered) != 2 || ordered[0].ToolUseID != "toolu_1" || ordered[1].ToolUseID != "toolu_2" {
		t.Fatalf("in order: %v %v", ordered, err)
	}
	if _, err := fakeClient(t, &fakeExecutor{reorder: true}).ExecuteBatch(context.Background(), uses); !errors.Is(err, ErrProtocol) {
		t.Errorf("out of order: err = %v, want ErrProtocol", err)
	}
	if _, err := fakeClient(t, &fakeExecutor{short: true}).ExecuteBatch(context.Background(), uses); !errors.Is(err, ErrProtocol) {
		t.Errorf("one answer missing: err = %v, want ErrProtocol", err)
	}
}

func TestStreamReportsProgressBeforeTheResult(t *testing.T) {
	var events []string
	r, err := fakeClient(t, &fakeExecutor{}).Stream(context.Background(), ToolUse{ID: "toolu_s", Name: "Bash"},
		func(p Progress) { events = append(events, p.ToolUseID+":"+p.Output) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"toolu_s:line 1\n", "toolu_s:line 2\n"}
	if len(events) != 2 || events[0] != want[0] || events[1] != want[1] {
		t.Errorf("progress %q, want %q", events, want)
	}
	if r.Text() != "line 1\nline 2\n" || r.Decision.Outcome != OutcomeAllow {
		t.Errorf("result %+v", r)
	}
}

func TestUnimplementedIsAnError(t *testing.T) {
	_, err := fakeClient(t, &fakeExecutor{}).ListTools(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.Unimplemented || e.Op != "ListTools" {
		t.Errorf("err = %#v", err)
	}
}
