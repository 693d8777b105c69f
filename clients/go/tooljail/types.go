package tooljail

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// ToolUse is a tool_use block as the model emits it.
type ToolUse struct {
	// ID is the model's tool_use id, echoed as the result's ToolUseID. The daemon runs an id
	// once: sending it again (same input) gets the first answer. Empty: a fresh one is made.
	ID string
	// Name is the tool's name, e.g. "Bash".
	Name string
	// Input is the tool's input, a JSON object.
	Input map[string]any
}

// ToolDefinition is a tool this caller may use, as ListTools offers it.
type ToolDefinition struct {
	// Name is what tool_use blocks call it.
	Name string
	// Description is what the model is told about it.
	Description string
	// InputSchema is the JSON Schema of its input (an object schema).
	InputSchema map[string]any
	// ReadOnly tools change nothing.
	ReadOnly bool
	// Destructive tools may delete or overwrite.
	Destructive bool
	// ConcurrencySafe tools run beside others of a batch.
	ConcurrencySafe bool
	// Sandboxed tools run in a disposable container rather than on the daemon's host.
	Sandboxed bool
	// MaxResultChars is the tool's own result budget in characters.
	MaxResultChars int64
	// DeferLoading tools are not shown up front: the model finds them with ToolSearch.
	DeferLoading bool
	// Aliases are older names still accepted.
	Aliases []string
	// Origin is "builtin", "operator" or "mcp".
	Origin string
	// Anthropic is the definition as the Messages API takes it in `tools` (name, description,
	// input_schema, and strict or defer_loading where they apply).
	Anthropic map[string]any
}

// Outcome is the policy's decision on a call.
type Outcome string

const (
	// OutcomeAllow: the call ran.
	OutcomeAllow Outcome = "allow"
	// OutcomeDeny: the call was refused and did not run.
	OutcomeDeny Outcome = "deny"
	// OutcomeAsk: a person must approve first; the decision carries an approval token.
	OutcomeAsk Outcome = "ask"
	// OutcomeUndecided: the policy was never asked (unknown tool, invalid input).
	OutcomeUndecided Outcome = ""
)

// Scope is how far an approval reaches.
type Scope string

const (
	// ScopeOnce approves this call only (the default).
	ScopeOnce Scope = "once"
	// ScopeSession approves similar calls (same tool and command prefix or path pattern) for
	// the rest of the session.
	ScopeSession Scope = "session"
)

// Decision is what the policy decided.
type Decision struct {
	// Outcome is allow, deny, ask, or undecided.
	Outcome Outcome
	// Reasons say why, in words shown to the model and the user.
	Reasons []string
	// DecisionID identifies the decision in the audit log.
	DecisionID string
	// PolicyRevision is the revision of the policy that decided.
	PolicyRevision string
	// ApprovalToken is set on ask: send the same tool_use again with it (see
	// [WithApprovalToken]) once a person approved.
	ApprovalToken string
}

// Report says how the call ran, for the program (not for the model).
type Report struct {
	// Sandboxed calls ran in a disposable container.
	Sandboxed bool
	// SandboxID names the container.
	SandboxID string
	// ExitCode is the command's exit status (Bash).
	ExitCode int
	// TimedOut calls were stopped at their timeout.
	TimedOut bool
	// OOMKilled calls ran out of memory.
	OOMKilled bool
	// Duration is how long the call ran.
	Duration time.Duration
	// Truncated results were cut to their budget; OriginalChars is their size before the cut.
	Truncated bool
	// OriginalChars is the result's size before it was cut.
	OriginalChars int64
	// Replayed answers were remembered from an earlier call with the same tool_use id: nothing
	// ran now.
	Replayed bool
	// KeptOutput is where a result over its budget was kept whole (readable with Read in the
	// session); the model got a preview.
	KeptOutput string
}

// BlockType says which kind of content a [ContentBlock] is.
type BlockType string

const (
	// TextBlock blocks carry Text.
	TextBlock BlockType = "text"
	// ImageBlock blocks carry MediaType and Data.
	ImageBlock BlockType = "image"
)

// ContentBlock is one block of a tool_result's content.
type ContentBlock struct {
	// Type is text or image.
	Type BlockType
	// Text is what the model reads (text blocks).
	Text string
	// MediaType is the image's MIME type, e.g. image/png (image blocks).
	MediaType string
	// Data is the raw image (image blocks).
	Data []byte
}

// Result is the daemon's answer to one tool_use: the tool_result, the decision and the report.
type Result struct {
	// ToolUseID is the id of the tool_use this answers.
	ToolUseID string
	// Content is what the model reads.
	Content []ContentBlock
	// IsError is set when the call was refused, invalid, or failed: the model is told so.
	IsError bool
	// Decision is the policy's.
	Decision Decision
	// Report says how it ran.
	Report Report
	// Summary is one line for people ("Read 120 lines of src/app.py").
	Summary string
	// SystemMessages are what hooks said for the user, not the model: show them, do not put
	// them in the conversation.
	SystemMessages []string

	// toolResultJSON is the daemon's own tool_result block (ExecuteResponse.tool_result_json).
	toolResultJSON string
}

// Text joins the text blocks of the result (images are left out).
func (r *Result) Text() string {
	var b strings.Builder
	for _, block := range r.Content {
		if block.Type == TextBlock {
			b.WriteString(block.Text)
		}
	}
	return b.String()
}

// ToolResultBlock is the exact Anthropic `tool_result` block to put in the next user message:
// type, tool_use_id, content (text blocks, and image blocks with a base64 source) and is_error.
// It is the daemon's own JSON (tool_result_json) when it sent one, else built from the result.
func (r *Result) ToolResultBlock() map[string]any {
	if r.toolResultJSON != "" {
		var block map[string]any
		if err := json.Unmarshal([]byte(r.toolResultJSON), &block); err == nil {
			return block
		}
	}
	content := make([]any, 0, len(r.Content))
	for _, block := range r.Content {
		switch block.Type {
		case TextBlock:
			content = append(content, map[string]any{"type": "text", "text": block.Text})
		case ImageBlock:
			content = append(content, map[string]any{
				"type": "image",
				"source": map[string]any{
					"type":       "base64",
					"media_type": block.MediaType,
					"data":       base64.StdEncoding.EncodeToString(block.Data),
				},
			})
		}
	}
	return map[string]any{
		"type":        "tool_result",
		"tool_use_id": r.ToolUseID,
		"content":     content,
		"is_error":    r.IsError,
	}
}

// Progress is live progress of a running call, for people (never for the model).
type Progress struct {
	// ToolUseID says whose progress it is (in a batch).
	ToolUseID string
	// Output is a chunk of output as it was produced (Bash).
	Output string
	// FilesScanned counts files scanned so far (Grep, Glob).
	FilesScanned int64
	// Message is anything else worth showing.
	Message string
	// DroppedChunks counts output chunks dropped because the client read too slowly.
	DroppedChunks int64
}

// Session is a workspace and the state of the calls in it.
type Session struct {
	// ID goes in [WithSession].
	ID string
	// Workspace is the absolute path of its workspace: file paths in tool inputs are absolute
	// paths inside it.
	Workspace string
	// IdleTTL is how long it lives without calls.
	IdleTTL time.Duration
	// Mode is the permission mode: default, acceptEdits, plan, dontAsk or bypassPermissions.
	Mode string
}

// SessionRequest says what session [Client.OpenSession] opens; its zero value is a fresh
// workspace with the daemon's defaults.
type SessionRequest struct {
	// Workspace is an existing directory to work in (the policy must allow it); empty: a fresh
	// directory.
	Workspace string
	// IdleTTL closes the session after this long without calls; 0: the daemon's default.
	IdleTTL time.Duration
	// Mode is the permission mode; empty: the daemon's default.
	Mode string
}

// SessionClosed is what closing a session did.
type SessionClosed struct {
	// CancelledCalls were still running and were cancelled.
	CancelledCalls int
	// WorkspaceDeleted is set when the workspace was deleted too.
	WorkspaceDeleted bool
}

// Approval is a call the policy asked a person about.
type Approval struct {
	// ID is also the approval token's id.
	ID string
	// Principal made the call.
	Principal string
	// SessionID is the call's session.
	SessionID string
	// ToolUseID is the call's tool_use id.
	ToolUseID string
	// Tool is the tool's name.
	Tool string
	// InputJSON is the exact input as JSON (empty when too large to review: InputChars says
	// how large, and such an ask can only be denied).
	InputJSON string
	// InputChars is the input's size.
	InputChars int64
	// Reasons say why the policy asked.
	Reasons []string
	// AskedAt is when the call was made.
	AskedAt time.Time
	// ExpiresAt is when the ask lapses.
	ExpiresAt time.Time
	// State is "pending", "approved" or "denied".
	State string
	// DecidedBy is the approver.
	DecidedBy string
	// Scope is what the approver granted.
	Scope Scope
	// Note is the approver's note.
	Note string
}

// Grant is an approval granted for the rest of a session.
type Grant struct {
	// Tool is the tool it covers.
	Tool string
	// Pattern is a command prefix (Bash) or a path pattern (file tools).
	Pattern string
	// ApprovedBy is the approver.
	ApprovedBy string
	// GrantedAt is when it was granted.
	GrantedAt time.Time
}

// Status is a short summary of the daemon's health.
type Status struct {
	// Version is the daemon's version.
	Version string
	// PolicyRevision is the revision of the policy serving.
	PolicyRevision string
	// OPAHealthy says whether the policy engine answers.
	OPAHealthy bool
	// DockerHealthy says whether the Docker engine answers.
	DockerHealthy bool
	// PoolReady counts warm containers ready in the pool.
	PoolReady int
	// InFlight counts calls running now.
	InFlight int
	// Sessions counts open sessions.
	Sessions int
	// InstanceID names the daemon instance (its containers carry it).
	InstanceID string
	// Principal is who the daemon believes the caller is.
	Principal string
}

// PolicyReload is the result of [Client.ReloadPolicies].
type PolicyReload struct {
	// Reloaded is set when the new policy replaced the old one.
	Reloaded bool
	// PolicyRevision is the revision serving now (unchanged when refused).
	PolicyRevision string
	// Error says why the reload was refused.
	Error string
}
