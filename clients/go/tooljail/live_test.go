package tooljail_test

// Live tests: the client against a real daemon (real OPA, real Docker). They run when
// TOOLJAIL_TARGET names a daemon and skip otherwise, unless TOOLJAIL_TEST_REQUIRE_LIVE=1 makes
// a missing variable a failure. The environment they read:
//
//	TOOLJAIL_TARGET            the daemon (unix:///path.sock or host:port); TOOLJAIL_TOKEN too
//	TOOLJAIL_TEST_WORKSPACE    the daemon's workspace, holding note.txt
//	TOOLJAIL_TEST_MARKER       text note.txt contains
//	TOOLJAIL_TEST_SERVE        a command that serves a daemon (see restart_test.go)
//	TOOLJAIL_TEST_REQUIRE_LIVE 1: fail, rather than skip, when one of the above is missing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tooljail/tooljail/clients/go/tooljail"
)

// need returns the environment variable, or skips the test (fails it under
// TOOLJAIL_TEST_REQUIRE_LIVE=1) when it is unset.
func need(t *testing.T, variable string) string {
	t.Helper()
	value := os.Getenv(variable)
	if value == "" {
		if os.Getenv("TOOLJAIL_TEST_REQUIRE_LIVE") == "1" {
			t.Fatalf("%s is not set, and TOOLJAIL_TEST_REQUIRE_LIVE=1 requires the live tests to run", variable)
		}
		t.Skipf("%s is not set: no live daemon to test against", variable)
	}
	return value
}

// live is a client of the daemon at TOOLJAIL_TARGET.
func live(t *testing.T) *tooljail.Client {
	t.Helper()
	need(t, tooljail.TargetVariable)
	client, err := tooljail.FromEnv(tooljail.WithTimeout(2 * time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// notePath is $TOOLJAIL_TEST_WORKSPACE/note.txt and the marker it holds.
func notePath(t *testing.T) (path, marker string) {
	t.Helper()
	workspace := need(t, "TOOLJAIL_TEST_WORKSPACE")
	marker = need(t, "TOOLJAIL_TEST_MARKER")
	return filepath.Join(workspace, "note.txt"), marker
}

func bash(command string) tooljail.ToolUse {
	return tooljail.ToolUse{ID: tooljail.NewToolUseID(), Name: "Bash", Input: map[string]any{"command": command}}
}

// ran fails the test unless the call was allowed and succeeded.
func ran(t *testing.T, r *tooljail.Result) {
	t.Helper()
	if r.Decision.Outcome != tooljail.OutcomeAllow || r.IsError {
		t.Fatalf("%s: decision %q, is_error %t, want an allowed call that succeeded; reasons %q; text:\n%s",
			r.ToolUseID, r.Decision.Outcome, r.IsError, r.Decision.Reasons, r.Text())
	}
}

func TestLiveListTools(t *testing.T) {
	client, ctx := live(t), testContext(t)
	tools, err := client.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"Read", "Bash"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s is not among the tools: %v", want, names)
		}
	}
	i := slices.Index(names, "Bash")
	if i >= 0 && (!tools[i].Sandboxed || tools[i].ReadOnly) {
		t.Errorf("Bash should be sandboxed and not read-only: %+v", tools[i])
	}

	anthropic, err := client.AnthropicTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(anthropic) != len(tools) {
		t.Fatalf("%d Anthropic tools for %d tools", len(anthropic), len(tools))
	}
	for _, tool := range anthropic {
		schema, _ := tool["input_schema"].(map[string]any)
		if name, _ := tool["name"].(string); name == "" || tool["description"] == nil || schema["type"] != "object" {
			t.Errorf("not a Messages API tool (name, description, input_schema of type object): %v", tool)
		}
	}
}

func TestLiveRead(t *testing.T) {
	client, ctx := live(t), testContext(t)
	path, marker := notePath(t)
	use := tooljail.ToolUse{ID: tooljail.NewToolUseID(), Name: "Read", Input: map[string]any{"file_path": path}}
	r, err := client.Execute(ctx, use)
	if err != nil {
		t.Fatal(err)
	}
	ran(t, r)
	if !strings.Contains(r.Text(), marker) {
		t.Errorf("Read %s: %q does not contain %q", path, r.Text(), marker)
	}
	if r.Report.Sandboxed {
		t.Error("Read runs on the host, yet the report says sandboxed")
	}
	block := r.ToolResultBlock()
	content, _ := block["content"].([]any)
	if block["type"] != "tool_result" || block["tool_use_id"] != use.ID || block["is_error"] != false || len(content) == 0 {
		t.Errorf("tool_result block %v", block)
	}
}

func TestLiveBashStreamsProgressFromTheSandbox(t *testing.T) {
	client, ctx := live(t), testContext(t)
	use := bash("for i in 1 2 3; do echo line $i; sleep 0.3; done")
	var progress []tooljail.Progress
	var firstProgress time.Time
	r, err := client.Stream(ctx, use, func(p tooljail.Progress) {
		if len(progress) == 0 {
			firstProgress = time.Now()
		}
		progress = append(progress, p)
	})
	answered := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	ran(t, r)
	if len(progress) == 0 {
		t.Fatal("no progress event came before the result")
	}
	// The command sleeps 0.9 s after its first line: progress that came live came well before
	// the result, not with it.
	if lead := answered.Sub(firstProgress); lead < 300*time.Millisecond {
		t.Errorf("the first progress event came only %s before the result: not live", lead)
	}
	var output strings.Builder
	for _, p := range progress {
		if p.ToolUseID != use.ID {
			t.Errorf("progress for %q, want %q", p.ToolUseID, use.ID)
		}
		output.WriteString(p.Output)
	}
	if !strings.Contains(output.String(), "line 1") {
		t.Errorf("the progress output %q lacks line 1", output.String())
	}
	if want := "line 1\nline 2\nline 3\n"; r.Text() != want {
		t.Errorf("result %q, want %q", r.Text(), want)
	}
	if !r.Report.Sandboxed || r.Report.ExitCode != 0 || r.Report.SandboxID == "" {
		t.Errorf("report %+v, want sandboxed with exit 0", r.Report)
	}
	t.Logf("%d progress events, the first %s before the result (%s)", len(progress),
		answered.Sub(firstProgress).Round(time.Millisecond), r.Summary)
}

func TestLiveBatchAnswersInRequestOrder(t *testing.T) {
	client, ctx := live(t), testContext(t)
	path, marker := notePath(t)
	// The slow sandboxed call comes first: the host-side ones finish sooner, and must still
	// come after it.
	uses := []tooljail.ToolUse{
		bash("sleep 0.5; echo batch one"),
		{ID: tooljail.NewToolUseID(), Name: "Read", Input: map[string]any{"file_path": path}},
		{ID: tooljail.NewToolUseID(), Name: "LS", Input: map[string]any{"path": filepath.Dir(path)}},
	}
	results, err := client.ExecuteBatch(ctx, uses)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(uses) {
		t.Fatalf("%d results for %d calls", len(results), len(uses))
	}
	for i, r := range results {
		if r.ToolUseID != uses[i].ID {
			t.Errorf("result %d answers %s, want %s", i+1, r.ToolUseID, uses[i].ID)
		}
		ran(t, r)
	}
	if got := strings.TrimSpace(results[0].Text()); got != "batch one" {
		t.Errorf("Bash: %q", got)
	}
	if !strings.Contains(results[1].Text(), marker) {
		t.Errorf("Read: %q lacks %q", results[1].Text(), marker)
	}
	if !strings.Contains(results[2].Text(), "note.txt") {
		t.Errorf("LS: %q lacks note.txt", results[2].Text())
	}
}

// A read outside the workspace is denied by the default policy: an is_error tool_result the
// model can act on, not a Go error.
func TestLiveDeniedCallIsAnErrorResult(t *testing.T) {
	client, ctx := live(t), testContext(t)
	use := tooljail.ToolUse{ID: tooljail.NewToolUseID(), Name: "Read", Input: map[string]any{"file_path": "/etc/passwd"}}
	r, err := client.Execute(ctx, use)
	if err != nil {
		t.Fatal(err)
	}
	if r.Decision.Outcome != tooljail.OutcomeDeny || !r.IsError || len(r.Decision.Reasons) == 0 {
		t.Fatalf("decision %+v, is_error %t: want deny with reasons", r.Decision, r.IsError)
	}
	if strings.Contains(r.Text(), "root:") {
		t.Fatalf("the denied Read returned the file:\n%s", r.Text())
	}
	if !strings.Contains(r.Text(), "outside the workspace") {
		t.Errorf("the model is not told why:\n%s", r.Text())
	}
	if block := r.ToolResultBlock(); block["is_error"] != true || block["tool_use_id"] != use.ID {
		t.Errorf("tool_result block %v", block)
	}
}

func TestLiveSessionRoundTrip(t *testing.T) {
	client, ctx := live(t), testContext(t)
	s, err := client.OpenSession(ctx, tooljail.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == "" || !filepath.IsAbs(s.Workspace) {
		t.Fatalf("session %+v", s)
	}
	r, err := client.Execute(ctx, bash("echo in session > s.txt && pwd"), tooljail.WithSession(s.ID))
	if err != nil {
		t.Fatal(err)
	}
	ran(t, r)
	if got := strings.TrimSpace(r.Text()); got != s.Workspace {
		t.Errorf("Bash ran in %q, want the session's workspace %q", got, s.Workspace)
	}
	read, err := client.Execute(ctx, tooljail.ToolUse{Name: "Read", Input: map[string]any{"file_path": filepath.Join(s.Workspace, "s.txt")}},
		tooljail.WithSession(s.ID))
	if err != nil {
		t.Fatal(err)
	}
	ran(t, read)
	if !strings.Contains(read.Text(), "in session") {
		t.Errorf("Read of what Bash wrote: %q", read.Text())
	}
	closed, err := client.CloseSession(ctx, s.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if !closed.WorkspaceDeleted || closed.CancelledCalls != 0 {
		t.Errorf("closed: %+v", closed)
	}
	if _, err := client.CloseSession(ctx, s.ID, false); !errors.Is(err, tooljail.ErrNotFound) {
		t.Errorf("closing it again: err = %v, want ErrNotFound", err)
	}
}

// The same tool_use id with another input is a malformed request, not a second call.
func TestLiveSameIDOtherInputIsInvalidArgument(t *testing.T) {
	client, ctx := live(t), testContext(t)
	first := bash("echo first")
	r, err := client.Execute(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	ran(t, r)
	again, err := client.Execute(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Report.Replayed || again.Text() != r.Text() {
		t.Errorf("the same call again: replayed %t, text %q (first %q)", again.Report.Replayed, again.Text(), r.Text())
	}
	other := tooljail.ToolUse{ID: first.ID, Name: "Bash", Input: map[string]any{"command": "echo second"}}
	_, err = client.Execute(ctx, other)
	var e *tooljail.Error
	if !errors.Is(err, tooljail.ErrInvalidArgument) || !errors.As(err, &e) || e.Op != "Execute" {
		t.Errorf("err = %v, want an ErrInvalidArgument *Error", err)
	}
}

func TestLiveBadTokenIsUnauthenticated(t *testing.T) {
	target := need(t, tooljail.TargetVariable)
	client, err := tooljail.New(target, tooljail.WithToken("not-a-token-of-this-daemon"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.ListTools(testContext(t))
	if !errors.Is(err, tooljail.ErrUnauthenticated) {
		t.Errorf("err = %v, want ErrUnauthenticated", err)
	}
}
