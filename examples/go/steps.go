package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	tooljailv1 "example.com/tooljail/examples/go/gen/tooljail/v1"
)

// The steps the example runs, in order; each prints one OK line or returns what went wrong.

func (c *client) listTools() error {
	ctx, cancel := c.call()
	defer cancel()
	resp, err := c.executor.ListTools(ctx, &tooljailv1.ListToolsRequest{})
	if err != nil {
		return fmt.Errorf("ListTools: %w", err)
	}
	var names []string
	for _, tool := range resp.GetTools() {
		names = append(names, tool.GetName())
	}
	for _, want := range []string{"Read", "Bash"} {
		if !slices.Contains(names, want) {
			return fmt.Errorf("tool %s missing from ListTools: got %v", want, names)
		}
	}
	fmt.Printf("OK listtools %d tools: %s\n", len(names), strings.Join(names, ", "))
	return nil
}

func (c *client) read(path, expect string) error {
	tu, err := c.toolUse("Read", map[string]any{"file_path": path})
	if err != nil {
		return err
	}
	resp, err := c.execute(&tooljailv1.ExecuteRequest{ToolUse: tu})
	if err != nil {
		return err
	}
	if err := allowed(resp); err != nil {
		return err
	}
	got := text(resp.GetResult())
	if !strings.Contains(got, expect) {
		return fmt.Errorf("Read %s: result does not contain %q:\n%s", path, expect, got)
	}
	fmt.Printf("OK read %s: %d chars, first line %q\n", path, len(got), firstLine(got))
	return nil
}

func (c *client) bash() error {
	tu, err := c.toolUse("Bash", map[string]any{"command": "echo hello from go"})
	if err != nil {
		return err
	}
	resp, err := c.execute(&tooljailv1.ExecuteRequest{ToolUse: tu})
	if err != nil {
		return err
	}
	if err := allowed(resp); err != nil {
		return err
	}
	got := strings.TrimSpace(text(resp.GetResult()))
	if got != "hello from go" {
		return fmt.Errorf("Bash echo: got %q, want %q", got, "hello from go")
	}
	report := resp.GetReport()
	fmt.Printf("OK bash %q (sandboxed=%t, exit %d, %d ms)\n",
		got, report.GetSandboxed(), report.GetExitCode(), report.GetDurationMs())
	return nil
}

// batch sends the tool_use blocks of one assistant turn; results stream back in request order.
func (c *client) batch(readPath string) error {
	inputs := []struct {
		name  string
		input map[string]any
	}{
		{"Bash", map[string]any{"command": "echo batch one"}},
		{"Read", map[string]any{"file_path": readPath}},
		{"LS", map[string]any{"path": filepath.Dir(readPath)}},
	}
	req := &tooljailv1.ExecuteBatchRequest{}
	for _, in := range inputs {
		tu, err := c.toolUse(in.name, in.input)
		if err != nil {
			return err
		}
		req.ToolUses = append(req.ToolUses, tu)
	}
	ctx, cancel := c.call()
	defer cancel()
	stream, err := c.executor.ExecuteBatch(ctx, req)
	if err != nil {
		return fmt.Errorf("ExecuteBatch: %w", err)
	}
	for i := 0; ; i++ {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if i != len(req.ToolUses) {
				return fmt.Errorf("ExecuteBatch ended after %d of %d results", i, len(req.ToolUses))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("ExecuteBatch result %d: %w", i+1, err)
		}
		if i >= len(req.ToolUses) {
			return fmt.Errorf("ExecuteBatch sent more results than the %d calls", len(req.ToolUses))
		}
		want := req.ToolUses[i]
		if got := resp.GetResult().GetToolUseId(); got != want.GetId() {
			return fmt.Errorf("result %d answers %s, want %s: results must come in request order",
				i+1, got, want.GetId())
		}
		if err := allowed(resp); err != nil {
			return fmt.Errorf("result %d (%s): %w", i+1, want.GetName(), err)
		}
		fmt.Printf("OK batch %d/%d %s %s: %q\n", i+1, len(req.ToolUses), want.GetName(), want.GetId(),
			firstLine(text(resp.GetResult())))
	}
}

// askThenApprove sends a call the policy wants a person to approve, then sends the same tool_use
// (same id, same input) again with the approval token, as a client does once the person said yes.
func (c *client) askThenApprove() error {
	tu, err := c.toolUse("Bash", map[string]any{"command": "git push --force origin main"})
	if err != nil {
		return err
	}
	first, err := c.execute(&tooljailv1.ExecuteRequest{ToolUse: tu})
	if err != nil {
		return err
	}
	decision := first.GetDecision()
	if decision.GetOutcome() != tooljailv1.Outcome_ASK {
		return fmt.Errorf("force push: decision %s, want ASK; reasons: %q",
			decision.GetOutcome(), decision.GetReasons())
	}
	if decision.GetApprovalToken() == "" {
		return errors.New("force push: decision ASK came without an approval_token")
	}
	fmt.Printf("OK ask %s: ASK with an approval token; reason: %s\n", tu.GetId(),
		firstLine(strings.Join(decision.GetReasons(), "; ")))

	second, err := c.execute(&tooljailv1.ExecuteRequest{ToolUse: tu, ApprovalToken: decision.GetApprovalToken()})
	if err != nil {
		return err
	}
	if outcome := second.GetDecision().GetOutcome(); outcome != tooljailv1.Outcome_ALLOW {
		return fmt.Errorf("approved force push: decision %s, want ALLOW; reasons: %q",
			outcome, second.GetDecision().GetReasons())
	}
	// With no git repository in the workspace the push fails: what matters is that it ran.
	report := second.GetReport()
	fmt.Printf("OK approve %s: ALLOW, ran (sandboxed=%t, exit %d): %q\n", tu.GetId(),
		report.GetSandboxed(), report.GetExitCode(), firstLine(text(second.GetResult())))
	return nil
}
