package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	tooljailv1 "example.com/tooljail/examples/go/gen/tooljail/v1"
)

// client wraps the generated ExecutorClient with what every step needs: fresh tool_use ids, a
// deadline per call, and the checks of an answer.
type client struct {
	executor tooljailv1.ExecutorClient
	timeout  time.Duration
	// runID keeps tool_use ids unique across runs: the daemon remembers answers by id.
	runID string
	calls int
}

// toolUse builds a tool_use block the way a model emits it: an id, a tool name, a JSON object input.
func (c *client) toolUse(name string, input map[string]any) (*tooljailv1.ToolUse, error) {
	fields, err := structpb.NewStruct(input)
	if err != nil {
		return nil, fmt.Errorf("tool input for %s is not JSON-like: %w", name, err)
	}
	c.calls++
	return &tooljailv1.ToolUse{
		Id:    fmt.Sprintf("toolu_go_%s_%d", c.runID, c.calls),
		Name:  name,
		Input: fields,
	}, nil
}

// call gives each RPC its own deadline, so a stuck daemon fails one step instead of hanging.
func (c *client) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

func (c *client) execute(req *tooljailv1.ExecuteRequest) (*tooljailv1.ExecuteResponse, error) {
	ctx, cancel := c.call()
	defer cancel()
	resp, err := c.executor.Execute(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("Execute %s: %w", req.GetToolUse().GetName(), err)
	}
	return resp, nil
}

// text joins the text blocks of a tool_result (image blocks are left out).
func text(result *tooljailv1.ToolResult) string {
	var b strings.Builder
	for _, block := range result.GetContent() {
		b.WriteString(block.GetText().GetText())
	}
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// allowed checks that a call was allowed and succeeded; the error says what came back instead.
func allowed(resp *tooljailv1.ExecuteResponse) error {
	outcome := resp.GetDecision().GetOutcome()
	if outcome != tooljailv1.Outcome_ALLOW {
		return fmt.Errorf("decision %s, want ALLOW; reasons: %q", outcome, resp.GetDecision().GetReasons())
	}
	if resp.GetResult().GetIsError() {
		return fmt.Errorf("tool_result is an error: %s", firstLine(text(resp.GetResult())))
	}
	return nil
}
