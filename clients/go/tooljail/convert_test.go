package tooljail

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	tooljailv1 "github.com/tooljail/tooljail/clients/go/tooljailv1"
)

func sampleResponse(t *testing.T) *tooljailv1.ExecuteResponse {
	t.Helper()
	return &tooljailv1.ExecuteResponse{
		Result: &tooljailv1.ToolResult{
			ToolUseId: "toolu_1",
			Content: []*tooljailv1.ContentBlock{
				{Kind: &tooljailv1.ContentBlock_Text{Text: &tooljailv1.TextBlock{Text: "one "}}},
				{Kind: &tooljailv1.ContentBlock_Image{Image: &tooljailv1.ImageBlock{MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}}}},
				{Kind: &tooljailv1.ContentBlock_Text{Text: &tooljailv1.TextBlock{Text: "two"}}},
			},
			IsError: true,
		},
		Decision: &tooljailv1.Decision{
			Outcome:        tooljailv1.Outcome_ASK,
			Reasons:        []string{"force push"},
			DecisionId:     "d1",
			PolicyRevision: "abc",
			ApprovalToken:  "tja1.x",
		},
		Report: &tooljailv1.ExecutionReport{
			Sandboxed: true, SandboxId: "c1", ExitCode: 3, TimedOut: true, OomKilled: true,
			DurationMs: 1500, Truncated: true, OriginalChars: 99, Replayed: true, KeptOutput: "/k",
		},
		Summary:        "Bash exited 3",
		SystemMessages: []string{"hook: hi"},
	}
}

func TestResultConvertsEveryField(t *testing.T) {
	got := result(sampleResponse(t))
	want := &Result{
		ToolUseID: "toolu_1",
		Content: []ContentBlock{
			{Type: TextBlock, Text: "one "},
			{Type: ImageBlock, MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
			{Type: TextBlock, Text: "two"},
		},
		IsError: true,
		Decision: Decision{
			Outcome: OutcomeAsk, Reasons: []string{"force push"}, DecisionID: "d1",
			PolicyRevision: "abc", ApprovalToken: "tja1.x",
		},
		Report: Report{
			Sandboxed: true, SandboxID: "c1", ExitCode: 3, TimedOut: true, OOMKilled: true,
			Duration: 1500 * time.Millisecond, Truncated: true, OriginalChars: 99, Replayed: true,
			KeptOutput: "/k",
		},
		Summary:        "Bash exited 3",
		SystemMessages: []string{"hook: hi"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("result:\n got %+v\nwant %+v", got, want)
	}
	if text := got.Text(); text != "one two" {
		t.Errorf("Text() = %q, want the text blocks joined", text)
	}
}

func TestOutcomes(t *testing.T) {
	for proto, want := range map[tooljailv1.Outcome]Outcome{
		tooljailv1.Outcome_ALLOW:               OutcomeAllow,
		tooljailv1.Outcome_DENY:                OutcomeDeny,
		tooljailv1.Outcome_ASK:                 OutcomeAsk,
		tooljailv1.Outcome_OUTCOME_UNSPECIFIED: OutcomeUndecided,
	} {
		response := &tooljailv1.ExecuteResponse{Decision: &tooljailv1.Decision{Outcome: proto}}
		if got := result(response).Decision.Outcome; got != want {
			t.Errorf("%s: outcome %q, want %q", proto, got, want)
		}
	}
}

// The block built from the result is the Messages API's tool_result, key for key.
func TestToolResultBlockShape(t *testing.T) {
	r := result(sampleResponse(t))
	got, err := json.Marshal(r.ToolResultBlock())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content":[{"text":"one ","type":"text"},` +
		`{"source":{"data":"iVBORw==","media_type":"image/png","type":"base64"},"type":"image"},` +
		`{"text":"two","type":"text"}],"is_error":true,"tool_use_id":"toolu_1","type":"tool_result"}`
	if string(got) != want {
		t.Errorf("tool_result block:\n got %s\nwant %s", got, want)
	}
}

// The daemon's own tool_result_json wins when present (it is the exact block), and equals the
// built one for the same content.
func TestToolResultBlockPrefersTheDaemonsJSON(t *testing.T) {
	response := &tooljailv1.ExecuteResponse{
		Result: &tooljailv1.ToolResult{
			ToolUseId: "toolu_2",
			Content:   []*tooljailv1.ContentBlock{{Kind: &tooljailv1.ContentBlock_Text{Text: &tooljailv1.TextBlock{Text: "hé"}}}},
		},
		// As daemon/models.py ToolResult.to_anthropic writes it.
		ToolResultJson: `{"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "hé"}], "is_error": false}`,
	}
	fromDaemon := result(response).ToolResultBlock()
	response.ToolResultJson = ""
	built := result(response).ToolResultBlock()
	if !reflect.DeepEqual(fromDaemon, built) {
		t.Errorf("daemon's block %v differs from the built one %v", fromDaemon, built)
	}
	response.ToolResultJson = `{"type": "tool_result", "tool_use_id": "toolu_2", "content": [], "is_error": false, "cache_control": {"type": "ephemeral"}}`
	if _, ok := result(response).ToolResultBlock()["cache_control"]; !ok {
		t.Error("the daemon's tool_result_json was not used as it is")
	}
}

func TestToolUseInputGoesThroughJSON(t *testing.T) {
	type options struct {
		Pattern string `json:"pattern"`
	}
	message, err := toolUseProto("Execute", ToolUse{
		ID:   "toolu_x",
		Name: "Grep",
		Input: map[string]any{
			"globs":   []string{"*.go", "*.py"}, // not a structpb type: JSON takes it
			"nested":  options{Pattern: "x"},
			"limit":   3,
			"verbose": true,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"globs":   []any{"*.go", "*.py"},
		"nested":  map[string]any{"pattern": "x"},
		"limit":   float64(3),
		"verbose": true,
	}
	if got := message.GetInput().AsMap(); !reflect.DeepEqual(got, want) {
		t.Errorf("input %v, want %v", got, want)
	}
	if message.GetId() != "toolu_x" || message.GetName() != "Grep" {
		t.Errorf("id/name %q %q", message.GetId(), message.GetName())
	}
}

func TestToolUseWithoutIDGetsAFreshOne(t *testing.T) {
	message, err := toolUseProto("Execute", ToolUse{Name: "LS"})
	if err != nil {
		t.Fatal(err)
	}
	if !toolUseIDPattern.MatchString(message.GetId()) {
		t.Errorf("id %q is not a fresh tool_use id", message.GetId())
	}
	if message.GetInput() == nil || len(message.GetInput().GetFields()) != 0 {
		t.Errorf("a nil input is sent as {}, got %v", message.GetInput())
	}
}

func TestToolUseInputThatIsNotJSONIsInvalidArgument(t *testing.T) {
	_, err := toolUseProto("Execute", ToolUse{ID: "toolu_y", Name: "Bash", Input: map[string]any{"command": make(chan int)}})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
}

func TestToolDefinitionsUseToolsJSON(t *testing.T) {
	schema, err := structpb.NewStruct(map[string]any{
		"type":       "object",
		"properties": map[string]any{"command": map[string]any{"type": "string"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	response := &tooljailv1.ListToolsResponse{
		Tools: []*tooljailv1.ToolDefinition{
			{
				Name: "Bash", Description: "Runs a command", InputSchema: schema,
				Traits:  &tooljailv1.ToolTraits{Destructive: true, Sandboxed: true, MaxResultChars: 30000},
				Aliases: []string{"Shell"}, Origin: &tooljailv1.ToolOrigin{Kind: "builtin"},
			},
			{Name: "LS", Description: "Lists", InputSchema: schema, Traits: &tooljailv1.ToolTraits{ReadOnly: true, ConcurrencySafe: true}},
		},
		// Only Bash is in tools_json: LS falls back to what the protobuf says.
		ToolsJson: `[{"name": "Bash", "description": "Runs a command", "input_schema": {"type": "object"}, "strict": true}]`,
	}
	tools := toolDefinitions(response)
	if len(tools) != 2 {
		t.Fatalf("%d tools, want 2", len(tools))
	}
	bash, ls := tools[0], tools[1]
	if !bash.Destructive || !bash.Sandboxed || bash.ReadOnly || bash.MaxResultChars != 30000 ||
		bash.Origin != "builtin" || !reflect.DeepEqual(bash.Aliases, []string{"Shell"}) {
		t.Errorf("Bash traits: %+v", bash)
	}
	if bash.Anthropic["strict"] != true {
		t.Errorf("Bash's Anthropic definition is not the daemon's: %v", bash.Anthropic)
	}
	if !ls.ReadOnly || !ls.ConcurrencySafe {
		t.Errorf("LS traits: %+v", ls)
	}
	wantLS := map[string]any{"name": "LS", "description": "Lists", "input_schema": schema.AsMap()}
	if !reflect.DeepEqual(ls.Anthropic, wantLS) {
		t.Errorf("LS's Anthropic definition %v, want %v", ls.Anthropic, wantLS)
	}
}

func TestApprovalTimes(t *testing.T) {
	a := approval(&tooljailv1.PendingApproval{ApprovalId: "a1", AskedAt: 1700000000, Scope: "session"})
	if !a.AskedAt.Equal(time.Unix(1700000000, 0)) || !a.ExpiresAt.IsZero() || a.Scope != ScopeSession {
		t.Errorf("approval %+v", a)
	}
}
