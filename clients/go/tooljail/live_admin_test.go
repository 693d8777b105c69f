package tooljail_test

// Live tests of approvals and the Admin service (see live_test.go for the environment they read).

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tooljail/tooljail/clients/go/tooljail"
)

// The default policy asks before a force push; the same tool_use sent again with the approval
// token runs (a caller on the Unix socket may approve its own call).
func TestLiveAskThenApproveWithTheToken(t *testing.T) {
	client, ctx := live(t), testContext(t)
	use := bash("git push --force origin main")
	asked, err := client.Execute(ctx, use)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Decision.Outcome != tooljail.OutcomeAsk || asked.Decision.ApprovalToken == "" || !asked.IsError {
		t.Fatalf("decision %+v (is_error %t), want ask with a token", asked.Decision, asked.IsError)
	}
	approved, err := client.Execute(ctx, use, tooljail.WithApprovalToken(asked.Decision.ApprovalToken))
	if err != nil {
		t.Fatal(err)
	}
	if approved.Decision.Outcome != tooljail.OutcomeAllow || approved.ToolUseID != use.ID {
		t.Fatalf("approved call: decision %+v for %s", approved.Decision, approved.ToolUseID)
	}
	// No git repository in the workspace: the push fails, but it ran, in the sandbox.
	if !approved.Report.Sandboxed || approved.Report.ExitCode == 0 {
		t.Errorf("report %+v, want a sandboxed run that failed", approved.Report)
	}
}

// An approver answers asks through Admin: one approved (its caller's retry runs), one denied
// (its caller's retry is refused, with the note).
func TestLiveAskAnsweredByAnApprover(t *testing.T) {
	client, ctx := live(t), testContext(t)
	approveMe, denyMe := bash("git push --force origin main"), bash("git push --force origin main")
	tokens := map[string]string{}
	for _, use := range []tooljail.ToolUse{approveMe, denyMe} {
		asked, err := client.Execute(ctx, use)
		if err != nil {
			t.Fatal(err)
		}
		if asked.Decision.Outcome != tooljail.OutcomeAsk {
			t.Fatalf("decision %+v, want ask", asked.Decision)
		}
		tokens[use.ID] = asked.Decision.ApprovalToken
	}
	pending, err := client.ListPendingApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byToolUse := map[string]*tooljail.Approval{}
	for i := range pending {
		byToolUse[pending[i].ToolUseID] = &pending[i]
	}
	for _, use := range []tooljail.ToolUse{approveMe, denyMe} {
		a := byToolUse[use.ID]
		if a == nil {
			t.Fatalf("the ask of %s is not pending: %d pending", use.ID, len(pending))
		}
		if a.Tool != "Bash" || a.State != "pending" || !strings.Contains(a.InputJSON, "git push --force") || a.AskedAt.IsZero() {
			t.Errorf("pending approval %+v", a)
		}
	}

	answered, err := client.Approve(ctx, byToolUse[approveMe.ID].ID, tooljail.ScopeOnce, "go client test")
	if err != nil {
		t.Fatal(err)
	}
	if answered.State != "approved" || answered.DecidedBy == "" {
		t.Errorf("approved: %+v", answered)
	}
	r, err := client.Execute(ctx, approveMe, tooljail.WithApprovalToken(tokens[approveMe.ID]))
	if err != nil {
		t.Fatal(err)
	}
	if r.Decision.Outcome != tooljail.OutcomeAllow || !r.Report.Sandboxed {
		t.Errorf("after Approve: decision %+v, report %+v", r.Decision, r.Report)
	}

	const note = "not on main, please"
	answered, err = client.Deny(ctx, byToolUse[denyMe.ID].ID, note)
	if err != nil {
		t.Fatal(err)
	}
	if answered.State != "denied" {
		t.Errorf("denied: %+v", answered)
	}
	r, err = client.Execute(ctx, denyMe, tooljail.WithApprovalToken(tokens[denyMe.ID]))
	if err != nil {
		t.Fatal(err)
	}
	if r.Decision.Outcome != tooljail.OutcomeDeny || !r.IsError || r.Report.Sandboxed {
		t.Errorf("after Deny: decision %+v, is_error %t, report %+v", r.Decision, r.IsError, r.Report)
	}
	if !strings.Contains(r.Text(), note) {
		t.Errorf("the model is not shown the approver's note %q:\n%s", note, r.Text())
	}
}

// Status is for admin principals: an admin gets the daemon's health, anyone else a
// PermissionDenied error (both are fine here: the daemon's configuration decides).
func TestLiveStatus(t *testing.T) {
	client, ctx := live(t), testContext(t)
	status, err := client.Status(ctx)
	if errors.Is(err, tooljail.ErrPermissionDenied) {
		t.Logf("not an admin principal: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if status.Version == "" || !status.OPAHealthy || status.Principal == "" {
		t.Errorf("status %+v", status)
	}
}

// Changing a session's permission mode is for admin principals, like Status.
func TestLiveSetSessionMode(t *testing.T) {
	client, ctx := live(t), testContext(t)
	s, err := client.OpenSession(ctx, tooljail.SessionRequest{IdleTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := client.CloseSession(ctx, s.ID, true); err != nil {
			t.Error(err)
		}
	}()
	if s.IdleTTL != 10*time.Minute {
		t.Errorf("idle TTL %s, want 10m", s.IdleTTL)
	}
	changed, err := client.SetSessionMode(ctx, s.ID, "plan")
	if errors.Is(err, tooljail.ErrPermissionDenied) {
		t.Logf("not an admin principal: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if changed.ID != s.ID || changed.Mode != "plan" {
		t.Errorf("after SetSessionMode: %+v", changed)
	}
	grants, err := client.ListGrants(ctx, s.ID)
	if err != nil || len(grants) != 0 {
		t.Errorf("grants of a fresh session: %v, %v", grants, err)
	}
}
