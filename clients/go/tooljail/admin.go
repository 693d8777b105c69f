package tooljail

// The Admin service: operator actions (admin principals only: Status, SetSessionMode, ListGrants,
// ReloadPolicies) and approvals (the policy decides who may list and answer which ask).

import (
	"context"

	tooljailv1 "github.com/tooljail/tooljail/clients/go/tooljailv1"
)

// Status is a short summary of the daemon's health (admin principals only).
func (c *Client) Status(ctx context.Context) (*Status, error) {
	response, err := unary(ctx, c, "Status", c.admin.Status, &tooljailv1.StatusRequest{})
	if err != nil {
		return nil, err
	}
	return daemonStatus(response), nil
}

// ListPendingApprovals is the asks waiting for a person that the caller may answer.
func (c *Client) ListPendingApprovals(ctx context.Context) ([]Approval, error) {
	request := &tooljailv1.ListPendingApprovalsRequest{}
	response, err := unary(ctx, c, "ListPendingApprovals", c.admin.ListPendingApprovals, request)
	if err != nil {
		return nil, err
	}
	approvals := make([]Approval, 0, len(response.GetApprovals()))
	for _, a := range response.GetApprovals() {
		approvals = append(approvals, *approval(a))
	}
	return approvals, nil
}

// Approve approves a waiting ask in scope (empty: [ScopeOnce]), with a note for the audit log;
// the asking caller then sends its call again with its approval token, and it runs.
func (c *Client) Approve(ctx context.Context, approvalID string, scope Scope, note string) (*Approval, error) {
	request := &tooljailv1.AnswerApprovalRequest{ApprovalId: approvalID, Scope: string(scope), Note: note}
	response, err := unary(ctx, c, "Approve", c.admin.Approve, request)
	if err != nil {
		return nil, err
	}
	return approval(response), nil
}

// Deny denies a waiting ask; the asking caller's retry is denied, and the model is shown note.
func (c *Client) Deny(ctx context.Context, approvalID, note string) (*Approval, error) {
	request := &tooljailv1.AnswerApprovalRequest{ApprovalId: approvalID, Note: note}
	response, err := unary(ctx, c, "Deny", c.admin.Deny, request)
	if err != nil {
		return nil, err
	}
	return approval(response), nil
}

// SetSessionMode changes a session's permission mode (default, acceptEdits, plan, dontAsk or
// bypassPermissions), as the policy allows.
func (c *Client) SetSessionMode(ctx context.Context, sessionID, mode string) (*Session, error) {
	request := &tooljailv1.SetSessionModeRequest{SessionId: sessionID, Mode: mode}
	response, err := unary(ctx, c, "SetSessionMode", c.admin.SetSessionMode, request)
	if err != nil {
		return nil, err
	}
	return session(response), nil
}

// ListGrants is the approvals granted for the rest of a session (scope "session").
func (c *Client) ListGrants(ctx context.Context, sessionID string) ([]Grant, error) {
	request := &tooljailv1.ListGrantsRequest{SessionId: sessionID}
	response, err := unary(ctx, c, "ListGrants", c.admin.ListGrants, request)
	if err != nil {
		return nil, err
	}
	grants := make([]Grant, 0, len(response.GetGrants()))
	for _, g := range response.GetGrants() {
		grants = append(grants, grant(g))
	}
	return grants, nil
}

// ReloadPolicies re-reads the daemon's policy folder; a policy that fails to compile or whose
// tests fail is refused (PolicyReload.Error says why) and the last good one keeps serving.
func (c *Client) ReloadPolicies(ctx context.Context) (PolicyReload, error) {
	request := &tooljailv1.ReloadPoliciesRequest{}
	response, err := unary(ctx, c, "ReloadPolicies", c.admin.ReloadPolicies, request)
	if err != nil {
		return PolicyReload{}, err
	}
	return PolicyReload{
		Reloaded:       response.GetReloaded(),
		PolicyRevision: response.GetPolicyRevision(),
		Error:          response.GetError(),
	}, nil
}
