package tooljail

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// NewToolUseID returns a fresh tool_use id, "toolu_" and 24 random hex digits. Keep it for the
// call's retries: the daemon runs an id once, so resending it never runs the call twice.
func NewToolUseID() string {
	var random [12]byte
	_, _ = rand.Read(random[:]) // crypto/rand.Read never fails (it panics if it could)
	return "toolu_" + hex.EncodeToString(random[:])
}

// ParseToolUse reads a tool_use content block as the Messages API has it in JSON
// ({"type": "tool_use", "id": ..., "name": ..., "input": {...}}), e.g. the raw JSON of an SDK's
// content block.
func ParseToolUse(block []byte) (ToolUse, error) {
	var parsed struct {
		Type  string         `json:"type"`
		ID    string         `json:"id"`
		Name  string         `json:"name"`
		Input map[string]any `json:"input"`
	}
	if err := json.Unmarshal(block, &parsed); err != nil {
		return ToolUse{}, fmt.Errorf("tooljail: not a tool_use block: %w", err)
	}
	if parsed.Type != "" && parsed.Type != "tool_use" {
		return ToolUse{}, fmt.Errorf("tooljail: a %q block, not a tool_use block", parsed.Type)
	}
	if parsed.Name == "" {
		return ToolUse{}, fmt.Errorf("tooljail: the tool_use block has no name")
	}
	return ToolUse{ID: parsed.ID, Name: parsed.Name, Input: parsed.Input}, nil
}
