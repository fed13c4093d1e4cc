package contract

import (
	"encoding/json"
	"fmt"
	"strings"
)

// This file is what the workflow and the activities agree on about the
// task's policy (docs/design.md §5.8) and a person's approvals (§5.9).

// Approval is a person's approval of one operation (starter approve).
type Approval struct {
	By   string `json:"by"`
	Note string `json:"note,omitempty"`
	// Hash is the SHA-256 of the canonical call the person approved
	// (AwaitingApproval.Hash, which the approve update carried): the call
	// is sent only if its own canonical hash is the same. Empty for an
	// approval given before approvals were bound to the call.
	Hash string `json:"hash,omitempty"`
}

// Denial is a person's denial of one operation (starter deny), or, with By
// empty, the approval's timeout.
type Denial struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason"`
}

// AwaitingApproval is what ExecuteTool reports of a call that waits for a
// person's approval: nothing was claimed or sent.
type AwaitingApproval struct {
	// Summary is one line: what the call would create, where ("pull
	// request capstan/x → main in acme/payments").
	Summary string `json:"summary"`
	// Effect names the call's effect: its tool and canonical arguments
	// (a hash, the ledger's request hash), so the task answers the same
	// effect asked again as it was answered before.
	Effect string `json:"effect"`
	// Hash is the SHA-256, in hex, of the canonical call (CanonicalCall):
	// the tool's name and every argument, as it will be sent. An approval
	// binds to it.
	Hash string `json:"hash,omitempty"`
	// Call is the canonical call as a person reads it, one field an
	// argument, each capped (CallField); `starter show TASK OP` prints it
	// whole from the ledger.
	Call []CallField `json:"call,omitempty"`
	// Arguments is the ledger reference of the call's arguments
	// (ExecuteToolInput.Arguments), where `starter show` reads them.
	Arguments string `json:"arguments,omitempty"`
}

// TaskPolicy is what a task's policy decides with (internal/policy.Task and
// the policy itself), fixed when the task starts and recorded in its
// history, so a worker deploy does not change a running task's rules. It
// holds no secret.
type TaskPolicy struct {
	// Repositories are OWNER/NAME of the repositories the task may touch:
	// its --repo, the repository of each --comment, each --allow-repo.
	Repositories []string `json:"repositories,omitempty"`
	// Base is the task's base branch.
	Base string `json:"base,omitempty"`
	// BranchPrefix starts every branch the task creates
	// (CAPSTAN_BRANCH_PREFIX); "" means the default.
	BranchPrefix string `json:"branch_prefix,omitempty"`
	Tenant       string `json:"tenant,omitempty"`
	// Labels are the task's labels (--label KEY=VALUE).
	Labels map[string]string `json:"labels,omitempty"`
	// File names the policy file (CAPSTAN_POLICY) the starter read, and
	// Source is its text; both "" when the defaults alone apply.
	File   string `json:"file,omitempty"`
	Source string `json:"source,omitempty"`
	// SourceRef, when set (changePolicyByReference), is the ledger item
	// holding File and Source (PolicyItem; its ledger.ItemRef, the sha256
	// of both): activity inputs then carry the text only on the chain's
	// first turn, whose ModelTurn stores it with the turn's commit, and
	// every other input names it by SourceRef alone, so history does not
	// grow by the file's size per call. Workers cache the compiled policy
	// by it.
	SourceRef string `json:"source_ref,omitempty"`
	// An input that names the text by SourceRef alone carries
	// PolicyPlaceholder(SourceRef) as its Source, never "": a worker that
	// predates references would read an empty Source as "no file" and
	// decide with the defaults alone, ignoring the operator's rules; the
	// placeholder does not compile there, so such a worker fails the call
	// worker_misconfigured instead (fails closed). Workers that know
	// references read it as no text (HasPolicyText).
	// MaxRefusals is how many refusals the task takes before it fails
	// policy_violation (CAPSTAN_POLICY_REFUSALS); zero means the default.
	MaxRefusals int `json:"max_refusals,omitempty"`
	// RequireApproval are tool names and safety classes (--require-approval)
	// whose calls, when the policy allows them, wait for a person's
	// approval (policy.Task.RequireApproval).
	RequireApproval []string `json:"require_approval,omitempty"`
	// AllowBranches are branches (--allow-branch) the task may write onto
	// in its repositories although it did not create them
	// (policy.Task.AllowBranches).
	AllowBranches []string `json:"allow_branches,omitempty"`
}

// PolicyItem is the ledger item that holds a task's policy file: its name
// and text, encoded the one way (JSON of the two, in this order), so the
// workflow and the activities agree on its reference.
func PolicyItem(file, source string) []byte {
	b, err := json.Marshal(policyItem{File: file, Source: source})
	if err != nil {
		panic(err) // two strings always encode
	}
	return b
}

// ParsePolicyItem reads a PolicyItem.
func ParsePolicyItem(data []byte) (file, source string, err error) {
	var it policyItem
	if err := json.Unmarshal(data, &it); err != nil {
		return "", "", fmt.Errorf("decode the task's policy item: %w", err)
	}
	return it.File, it.Source, nil
}

type policyItem struct {
	File   string `json:"file"`
	Source string `json:"source"`
}

// PolicyDecision is the decision of a task's policy on one call, as the
// activity reports it to the workflow (internal/policy.Decision).
type PolicyDecision struct {
	Effect string // allow, deny or require_approval
	Rule   string
	Reason string
	// Layer is the rule set the rule is of (policy.Decision.Layer): the
	// defaults, the deciding worker's own file, or the task's.
	Layer string `json:",omitempty"`
	// Refused says nothing was sent: a deny, or a require_approval of a
	// task that cannot ask a person (ExecuteToolInput.Approvals false).
	Refused bool
	// Approved: a require_approval decision on a call that carried a
	// person's approval, which let it through.
	Approved bool `json:",omitempty"`
}

// policyPlaceholderKey is the only key of PolicyPlaceholder's YAML: one a
// policy file may not have.
const policyPlaceholderKey = "capstan_policy_by_reference"

// PolicyPlaceholder is the Source of a policy context that names its file
// by reference (TaskPolicy.SourceRef) without carrying its text.
func PolicyPlaceholder(ref string) string { return policyPlaceholderKey + ": " + ref + "\n" }

// HasPolicyText reports whether tp carries its policy file's text, not
// nothing and not PolicyPlaceholder.
func HasPolicyText(tp *TaskPolicy) bool {
	return tp != nil && tp.Source != "" && !strings.HasPrefix(tp.Source, policyPlaceholderKey+": ")
}
