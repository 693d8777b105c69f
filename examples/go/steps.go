package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tooljail/tooljail/clients/go/tooljail"
)

// example holds what every step needs; the client gives each call its deadline.
type example struct {
	client *tooljail.Client
}

// The steps the example runs, in order; each prints one OK line or returns what went wrong.

func (e *example) listTools() error {
	tools, err := e.client.ListTools(context.Background())
	if err != nil {
		return err
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"Read", "Bash"} {
		if !slices.Contains(names, want) {
			return fmt.Errorf("tool %s missing from ListTools: got %v", want, names)
		}
	}
	fmt.Printf("OK listtools %d tools: %s\n", len(names), strings.Join(names, ", "))
	return nil
}

func (e *example) read(path, expect string) error {
	result, err := e.execute("Read", map[string]any{"file_path": path})
	if err != nil {
		return err
	}
	got := result.Text()
	if !strings.Contains(got, expect) {
		return fmt.Errorf("Read %s: result does not contain %q:\n%s", path, expect, got)
	}
	fmt.Printf("OK read %s: %d chars, first line %q\n", path, len(got), firstLine(got))
	return nil
}

func (e *example) bash() error {
	result, err := e.execute("Bash", map[string]any{"command": "echo hello from go"})
	if err != nil {
		return err
	}
	got := strings.TrimSpace(result.Text())
	if got != "hello from go" {
		return fmt.Errorf("Bash echo: got %q, want %q", got, "hello from go")
	}
	report := result.Report
	fmt.Printf("OK bash %q (sandboxed=%t, exit %d, %d ms)\n",
		got, report.Sandboxed, report.ExitCode, report.Duration.Milliseconds())
	return nil
}

// batch sends the tool_use blocks of one assistant turn; the client checks that the results come
// back in request order.
func (e *example) batch(readPath string) error {
	uses := []tooljail.ToolUse{
		toolUse("Bash", map[string]any{"command": "echo batch one"}),
		toolUse("Read", map[string]any{"file_path": readPath}),
		toolUse("LS", map[string]any{"path": filepath.Dir(readPath)}),
	}
	results, err := e.client.ExecuteBatch(context.Background(), uses)
	if err != nil {
		return err
	}
	for i, result := range results {
		if err := allowed(result); err != nil {
			return fmt.Errorf("result %d (%s): %w", i+1, uses[i].Name, err)
		}
		fmt.Printf("OK batch %d/%d %s %s: %q\n", i+1, len(uses), uses[i].Name, result.ToolUseID,
			firstLine(result.Text()))
	}
	return nil
}

// askThenApprove sends a call the policy wants a person to approve, then sends the same tool_use
// (same id, same input) again with the approval token, as a client does once the person said yes.
func (e *example) askThenApprove() error {
	use := toolUse("Bash", map[string]any{"command": "git push --force origin main"})
	first, err := e.client.Execute(context.Background(), use)
	if err != nil {
		return err
	}
	decision := first.Decision
	if decision.Outcome != tooljail.OutcomeAsk {
		return fmt.Errorf("force push: decision %q, want ask; reasons: %q", decision.Outcome, decision.Reasons)
	}
	if decision.ApprovalToken == "" {
		return errors.New("force push: decision ASK came without an approval_token")
	}
	fmt.Printf("OK ask %s: ASK with an approval token; reason: %s\n", use.ID,
		firstLine(strings.Join(decision.Reasons, "; ")))

	second, err := e.client.Execute(context.Background(), use, tooljail.WithApprovalToken(decision.ApprovalToken))
	if err != nil {
		return err
	}
	if outcome := second.Decision.Outcome; outcome != tooljail.OutcomeAllow {
		return fmt.Errorf("approved force push: decision %q, want allow; reasons: %q", outcome, second.Decision.Reasons)
	}
	// With no git repository in the workspace the push fails: what matters is that it ran.
	report := second.Report
	fmt.Printf("OK approve %s: ALLOW, ran (sandboxed=%t, exit %d): %q\n", use.ID,
		report.Sandboxed, report.ExitCode, firstLine(second.Text()))
	return nil
}

// execute runs one call that must be allowed and succeed.
func (e *example) execute(name string, input map[string]any) (*tooljail.Result, error) {
	result, err := e.client.Execute(context.Background(), toolUse(name, input))
	if err != nil {
		return nil, err
	}
	return result, allowed(result)
}

// toolUse builds a tool_use block the way a model emits it: a fresh id, a tool name, a JSON input.
func toolUse(name string, input map[string]any) tooljail.ToolUse {
	return tooljail.ToolUse{ID: tooljail.NewToolUseID(), Name: name, Input: input}
}

// allowed checks that a call was allowed and succeeded; the error says what came back instead.
func allowed(result *tooljail.Result) error {
	if outcome := result.Decision.Outcome; outcome != tooljail.OutcomeAllow {
		return fmt.Errorf("decision %q, want allow; reasons: %q", outcome, result.Decision.Reasons)
	}
	if result.IsError {
		return fmt.Errorf("tool_result is an error: %s", firstLine(result.Text()))
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
