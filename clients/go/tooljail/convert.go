package tooljail

// The one place that touches generated code's messages: protobuf in, plain Go types out.

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	tooljailv1 "github.com/tooljail/tooljail/clients/go/tooljailv1"
)

var outcomes = map[tooljailv1.Outcome]Outcome{
	tooljailv1.Outcome_ALLOW: OutcomeAllow,
	tooljailv1.Outcome_DENY:  OutcomeDeny,
	tooljailv1.Outcome_ASK:   OutcomeAsk,
}

// toolUseProto converts a tool_use for the wire, with a fresh id when it has none. The input goes
// through JSON, so any value encoding/json takes is accepted ([]string, structs with tags...).
func toolUseProto(op string, use ToolUse) (*tooljailv1.ToolUse, error) {
	input := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if use.Input != nil {
		raw, err := json.Marshal(use.Input)
		if err == nil {
			err = input.UnmarshalJSON(raw)
		}
		if err != nil {
			return nil, &Error{Op: op, Code: codes.InvalidArgument,
				Message: fmt.Sprintf("the input of %s %s is not a JSON object: %v", use.Name, use.ID, err)}
		}
	}
	id := use.ID
	if id == "" {
		id = NewToolUseID()
	}
	return &tooljailv1.ToolUse{Id: id, Name: use.Name, Input: input}, nil
}

func toolUsesProto(op string, uses []ToolUse) ([]*tooljailv1.ToolUse, error) {
	converted := make([]*tooljailv1.ToolUse, 0, len(uses))
	for _, use := range uses {
		message, err := toolUseProto(op, use)
		if err != nil {
			return nil, err
		}
		converted = append(converted, message)
	}
	return converted, nil
}

func toolDefinitions(response *tooljailv1.ListToolsResponse) []ToolDefinition {
	// tools_json is the same list as the Messages API takes it, byte for byte what the daemon
	// advertises (strict, defer_loading); the protobuf definitions stand in when it is missing.
	anthropic := map[string]map[string]any{}
	var listed []map[string]any
	if json.Unmarshal([]byte(response.GetToolsJson()), &listed) == nil {
		for _, tool := range listed {
			if name, ok := tool["name"].(string); ok {
				anthropic[name] = tool
			}
		}
	}
	tools := make([]ToolDefinition, 0, len(response.GetTools()))
	for _, t := range response.GetTools() {
		schema := t.GetInputSchema().AsMap()
		definition := ToolDefinition{
			Name:            t.GetName(),
			Description:     t.GetDescription(),
			InputSchema:     schema,
			ReadOnly:        t.GetTraits().GetReadOnly(),
			Destructive:     t.GetTraits().GetDestructive(),
			ConcurrencySafe: t.GetTraits().GetConcurrencySafe(),
			Sandboxed:       t.GetTraits().GetSandboxed(),
			MaxResultChars:  t.GetTraits().GetMaxResultChars(),
			DeferLoading:    t.GetDeferLoading(),
			Aliases:         t.GetAliases(),
			Origin:          t.GetOrigin().GetKind(),
			Anthropic:       anthropic[t.GetName()],
		}
		if definition.Anthropic == nil {
			definition.Anthropic = map[string]any{
				"name":         t.GetName(),
				"description":  t.GetDescription(),
				"input_schema": schema,
			}
		}
		tools = append(tools, definition)
	}
	return tools
}

func result(response *tooljailv1.ExecuteResponse) *Result {
	r := response.GetResult()
	content := make([]ContentBlock, 0, len(r.GetContent()))
	for _, block := range r.GetContent() {
		switch kind := block.GetKind().(type) {
		case *tooljailv1.ContentBlock_Text:
			content = append(content, ContentBlock{Type: TextBlock, Text: kind.Text.GetText()})
		case *tooljailv1.ContentBlock_Image:
			content = append(content, ContentBlock{
				Type: ImageBlock, MediaType: kind.Image.GetMediaType(), Data: kind.Image.GetData(),
			})
		}
	}
	d, report := response.GetDecision(), response.GetReport()
	return &Result{
		ToolUseID: r.GetToolUseId(),
		Content:   content,
		IsError:   r.GetIsError(),
		Decision: Decision{
			Outcome:        outcomes[d.GetOutcome()],
			Reasons:        d.GetReasons(),
			DecisionID:     d.GetDecisionId(),
			PolicyRevision: d.GetPolicyRevision(),
			ApprovalToken:  d.GetApprovalToken(),
		},
		Report: Report{
			Sandboxed:     report.GetSandboxed(),
			SandboxID:     report.GetSandboxId(),
			ExitCode:      int(report.GetExitCode()),
			TimedOut:      report.GetTimedOut(),
			OOMKilled:     report.GetOomKilled(),
			Duration:      time.Duration(report.GetDurationMs()) * time.Millisecond,
			Truncated:     report.GetTruncated(),
			OriginalChars: report.GetOriginalChars(),
			Replayed:      report.GetReplayed(),
			KeptOutput:    report.GetKeptOutput(),
		},
		Summary:        response.GetSummary(),
		SystemMessages: response.GetSystemMessages(),
		toolResultJSON: response.GetToolResultJson(),
	}
}

func progress(p *tooljailv1.Progress) Progress {
	return Progress{
		ToolUseID:     p.GetToolUseId(),
		Output:        p.GetOutput(),
		FilesScanned:  p.GetFilesScanned(),
		Message:       p.GetMessage(),
		DroppedChunks: p.GetDroppedChunks(),
	}
}

func session(s *tooljailv1.Session) *Session {
	return &Session{
		ID:        s.GetId(),
		Workspace: s.GetWorkspace(),
		IdleTTL:   time.Duration(s.GetIdleTtlS()) * time.Second,
		Mode:      s.GetMode(),
	}
}

func approval(a *tooljailv1.PendingApproval) *Approval {
	return &Approval{
		ID:         a.GetApprovalId(),
		Principal:  a.GetPrincipal(),
		SessionID:  a.GetSessionId(),
		ToolUseID:  a.GetToolUseId(),
		Tool:       a.GetTool(),
		InputJSON:  a.GetInputJson(),
		InputChars: a.GetInputChars(),
		Reasons:    a.GetReasons(),
		AskedAt:    unixTime(a.GetAskedAt()),
		ExpiresAt:  unixTime(a.GetExpiresAt()),
		State:      a.GetState(),
		DecidedBy:  a.GetDecidedBy(),
		Scope:      Scope(a.GetScope()),
		Note:       a.GetNote(),
	}
}

func grant(g *tooljailv1.Grant) Grant {
	return Grant{
		Tool:       g.GetTool(),
		Pattern:    g.GetPattern(),
		ApprovedBy: g.GetApprovedBy(),
		GrantedAt:  unixTime(g.GetGrantedAt()),
	}
}

func daemonStatus(s *tooljailv1.StatusResponse) *Status {
	return &Status{
		Version:        s.GetVersion(),
		PolicyRevision: s.GetPolicyRevision(),
		OPAHealthy:     s.GetOpaHealthy(),
		DockerHealthy:  s.GetDockerHealthy(),
		PoolReady:      int(s.GetPoolReady()),
		InFlight:       int(s.GetInFlight()),
		Sessions:       int(s.GetSessions()),
		InstanceID:     s.GetInstanceId(),
		Principal:      s.GetPrincipal(),
	}
}

// unixTime is seconds since the epoch as a time; 0 (unset) is the zero time.
func unixTime(seconds int64) time.Time {
	if seconds == 0 {
		return time.Time{}
	}
	return time.Unix(seconds, 0)
}
