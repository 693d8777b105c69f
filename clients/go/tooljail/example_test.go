package tooljail_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/tooljail/tooljail/clients/go/tooljail"
)

// nextAssistantMessage stands for a Messages API request with your SDK or HTTP client: it sends
// the conversation and the tools and returns the assistant message's content blocks as JSON.
func nextAssistantMessage(ctx context.Context, messages []map[string]any, tools []map[string]any) ([]json.RawMessage, error) {
	return nil, errors.New("call the Messages API here")
}

// An agent loop: the model's tool_use blocks go to the daemon as one batch, and its tool_result
// blocks, in the same order, are the next user message.
func Example_agentLoop() {
	ctx := context.Background()
	jail, err := tooljail.FromEnv() // TOOLJAIL_TARGET, TOOLJAIL_TOKEN
	if err != nil {
		log.Fatal(err)
	}
	defer jail.Close()
	session, err := jail.OpenSession(ctx, tooljail.SessionRequest{})
	if err != nil {
		log.Fatal(err)
	}
	defer jail.CloseSession(ctx, session.ID, false)
	tools, err := jail.AnthropicTools(ctx, tooljail.WithSession(session.ID))
	if err != nil {
		log.Fatal(err)
	}

	messages := []map[string]any{{"role": "user", "content": "How many lines does hello.txt have?"}}
	for {
		content, err := nextAssistantMessage(ctx, messages, tools)
		if err != nil {
			log.Fatal(err)
		}
		messages = append(messages, map[string]any{"role": "assistant", "content": content})
		var uses []tooljail.ToolUse
		for _, block := range content {
			if use, err := tooljail.ParseToolUse(block); err == nil {
				uses = append(uses, use)
			}
		}
		if len(uses) == 0 {
			break // the model answered without tools: done
		}
		results, err := jail.ExecuteBatch(ctx, uses, tooljail.WithSession(session.ID))
		if err != nil {
			log.Fatal(err) // the daemon failed, not a tool: see the Err* sentinels
		}
		var reply []map[string]any
		for _, result := range results {
			reply = append(reply, result.ToolResultBlock()) // denied and failed calls included
		}
		messages = append(messages, map[string]any{"role": "user", "content": reply})
	}
}

// A call that needs a person's approval: send the same tool_use again with the token.
func ExampleClient_Execute_approval() {
	ctx := context.Background()
	jail, err := tooljail.New("unix:///run/tooljail/tooljail.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer jail.Close()
	use := tooljail.ToolUse{
		ID:    tooljail.NewToolUseID(), // keep it: the retry must carry the same id
		Name:  "Bash",
		Input: map[string]any{"command": "git push --force origin main"},
	}
	result, err := jail.Execute(ctx, use)
	if errors.Is(err, tooljail.ErrUnavailable) {
		log.Fatal("the daemon is down; sending the same tool_use later is safe")
	} else if err != nil {
		log.Fatal(err)
	}
	if result.Decision.Outcome == tooljail.OutcomeAsk {
		fmt.Println("asking a person:", result.Decision.Reasons)
		// ... once they approved (tooljail approvals approve <id>, or Client.Approve):
		result, err = jail.Execute(ctx, use, tooljail.WithApprovalToken(result.Decision.ApprovalToken))
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(result.Decision.Outcome, result.Report.ExitCode, result.Text())
}

// Live output of a command while it runs.
func ExampleClient_Stream() {
	ctx := context.Background()
	jail, err := tooljail.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	defer jail.Close()
	use := tooljail.ToolUse{Name: "Bash", Input: map[string]any{"command": "make test"}}
	result, err := jail.Stream(ctx, use, func(p tooljail.Progress) { fmt.Print(p.Output) })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", result.Report.ExitCode)
}
