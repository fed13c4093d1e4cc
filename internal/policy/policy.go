// Package policy decides, before a tool sends anything, whether one tool
// call may be made for a task (issue 15, docs/design.md §5.8): allow, deny
// (with a reason) or require a person's approval.
//
// Its guarantees:
//
//   - A decision is a pure function of the policy, the call (Call) and the
//     task (Task): no clock, no I/O, no randomness, so a decision made again
//     for the same call is the same decision.
//   - Every decision names the rule that made it and carries one sentence
//     saying why, and for a refusal what is allowed instead ("acme/other is
//     outside this task's repositories: acme/payments").
//   - The built-in default rules (BuiltinRules: only the task's
//     repositories, never a write to the base branch or the repository's
//     default branch, created branches carry the prefix, nothing under
//     .github/ nor a root action.yml, and writes only onto branches the
//     task created or --allow-branch names), the worker's own file and the
//     task's file (Parse and Load) each decide on their own, a file by its
//     first rule that matches, and a deny of any wins (Stack): a file's
//     allow never widens the defaults; only a worker's rule with
//     `override` loosens one. With no file the defaults alone apply.
//   - Rules see one form of names: repositories in lower case, as GitHub
//     compares them, and refs as branch names, HEAD as the default branch
//     (normalize).
//   - A file is compiled once, when it is loaded; a bad one is refused whole
//     with one sentence naming the file, its line and the rule (FileError),
//     so a policy that loaded never fails to compile later.
//   - It fails closed: a rule whose CEL condition cannot be evaluated for a
//     call (a missing label, say) refuses that call, named by the rule.
//
// The package depends on neither the tools nor the activities: they fill a
// Call from their typed arguments (BuiltinTools says which fields each
// built-in tool fills) and import this package, never the reverse.
package policy

import (
	"strings"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
)

// Call is one tool call as the policy sees it. Fields a tool has no use for
// stay empty; BuiltinTools documents which ones each built-in tool fills.
type Call struct {
	// Tool is the tool's registered name, e.g. "github_put_file".
	Tool string
	// Class is the tool's safety class.
	Class capstan.Class
	// Server is the MCP server the tool comes from; "" for a built-in tool.
	Server string
	// Repository is OWNER/NAME of the repository the call reads or writes;
	// "" when the tool has none (MCP tools, Slack).
	Repository string
	// Branch is the branch the call acts on: the one it writes to, the one
	// it creates, the head of a pull request, or the ref a read is at. A
	// leading "refs/heads/" is ignored.
	Branch string
	// Path is the file the call reads or writes, relative to the
	// repository's root.
	Path string
	// From is the branch (or commit) a created branch starts from; "" when
	// the call creates no branch or names no start.
	From string
	// Into is the branch a pull request merges into; "" for other calls.
	Into string
	// CreatesBranch says the call creates Branch.
	CreatesBranch bool
	// Writes says the call has an effect. A call whose Class is anything
	// but read_only counts as writing whatever Writes says.
	Writes bool
	// Attributes are the tool's own attributes of the call
	// (tool.Target.Attributes), read from its arguments, which a rule's
	// condition reads as `attributes`; nil for a tool that gives none.
	Attributes map[string]string
}

// writes is whether the call counts as a write: Writes, or any class but
// read_only.
func (c Call) writes() bool {
	return c.Writes || (c.Class != "" && c.Class != capstan.ClassReadOnly)
}

// WritesOnto is whether the call writes onto Branch, an existing branch: a
// write that names a branch it neither creates (CreatesBranch) nor
// proposes as a pull request's head (a call with Into). A pull request
// changes no branch: its head stays as it is until a person merges it into
// Into, which default/base-branch and the repository's own protection
// guard.
func (c Call) WritesOnto() bool {
	return c.writes() && c.Branch != "" && !c.CreatesBranch && c.Into == ""
}

// Task is what the policy knows of the task a call is made for. It is fixed
// when the task starts.
type Task struct {
	// Repositories are OWNER/NAME of the repositories the task may touch:
	// its --repo, the repository of each --comment, and each --allow-repo.
	// They compare without regard to case, as GitHub's names do.
	Repositories []string
	// Base is the task's base branch (--base).
	Base string
	// DefaultBranch is the default branch of the task's repository, when it
	// is known; "" otherwise.
	DefaultBranch string
	// BranchPrefix is what every branch the task creates starts with; ""
	// means config.DefaultBranchPrefix.
	BranchPrefix string
	// Tenant is the task's tenant (--tenant).
	Tenant string
	// Labels are the task's labels (--label KEY=VALUE).
	Labels map[string]string
	// RequireApproval are tool names and safety classes (starter run
	// --require-approval): a call of one of them, or of one of those
	// classes, that the rules allow waits for a person's approval instead
	// (RuleRequireApproval). A refusal stays a refusal.
	RequireApproval []string
	// AllowBranches are branches (starter run --allow-branch) the task may
	// write onto in any of its repositories although it did not create
	// them (RuleOwnBranch). The base and the default branch stay refused.
	AllowBranches []string
	// CreatedBranches are the branches this task has created, as the
	// ledger records them: its github_create_branch operations that
	// succeeded, in any run of its chain, reconciled ones included. Unlike
	// the other fields it grows as the task runs; the activity reads it
	// before deciding a write onto a branch (RuleOwnBranch).
	CreatedBranches []Branch

	// lifted is the default rule the worker's file lifts for the call
	// being decided (Stack); "" for none.
	lifted string
}

// Branch is one branch of one repository.
type Branch struct {
	// Repository is OWNER/NAME; it compares without regard to case.
	Repository string
	// Name is the branch's name, without refs/heads/.
	Name string
}

// created is whether the task created branch in repo.
func (t Task) created(repo, branch string) bool {
	for _, b := range t.CreatedBranches {
		if b.Name == branch && strings.EqualFold(b.Repository, repo) {
			return true
		}
	}
	return false
}

// allowsBranch is whether --allow-branch names branch.
func (t Task) allowsBranch(branch string) bool {
	for _, b := range t.AllowBranches {
		if b == branch {
			return true
		}
	}
	return false
}

// applies is whether the default rule named rule applies to the call
// being decided: it does unless the worker's file lifted it (override).
func (t Task) applies(rule string) bool { return t.lifted != rule }

// needsApproval is the --require-approval entry that names c's tool or
// class; "" when none does.
func (t Task) needsApproval(c Call) string {
	for _, n := range t.RequireApproval {
		if n == c.Tool || (c.Class != "" && n == string(c.Class)) {
			return n
		}
	}
	return ""
}

// prefix is the task's branch prefix, the default filled in.
func (t Task) prefix() string {
	if t.BranchPrefix == "" {
		return config.DefaultBranchPrefix
	}
	return t.BranchPrefix
}

// hasRepository is whether repo is one of the task's repositories.
func (t Task) hasRepository(repo string) bool {
	for _, r := range t.Repositories {
		if strings.EqualFold(r, repo) {
			return true
		}
	}
	return false
}

// Effect is what a decision lets happen.
type Effect string

// The effects of a decision, and of a rule.
const (
	// Allow: the call is sent.
	Allow Effect = "allow"
	// Deny: nothing is sent; the reason goes back to the model.
	Deny Effect = "deny"
	// RequireApproval: nothing is sent until a person approves.
	RequireApproval Effect = "require_approval"
)

// Decision is the policy's answer for one call.
type Decision struct {
	Effect Effect
	// Rule is the name of the rule that decided: a file rule's name, or
	// one of the default rules' (RuleRepository, …).
	Rule string
	// Layer is the rule set the rule is of (Stack): LayerDefault, or
	// "worker FILE@SHA" or "task FILE" for a file's rule, "task" for
	// RuleRequireApproval.
	Layer string
	// Reason is one sentence: why, and for a refusal what is allowed.
	Reason string
}

// Refused is whether the call must not be sent at all.
func (d Decision) Refused() bool { return d.Effect == Deny }

// NeedsApproval is whether the call waits for a person's approval.
func (d Decision) NeedsApproval() bool { return d.Effect == RequireApproval }

// Allowed is whether the call may be sent now.
func (d Decision) Allowed() bool { return d.Effect == Allow }

// String is the decision as one line: "deny by default/repository: …".
func (d Decision) String() string {
	return string(d.Effect) + " by " + d.Rule + ": " + d.Reason
}

// Policy is a compiled set of rules: a file's, decided beside the defaults
// (Decide, Stack). The zero value and a nil *Policy hold no rules: the
// defaults alone decide. A Policy is immutable
// once made, and safe for concurrent use.
type Policy struct {
	file   string // the file's name, as given to Parse
	source []byte
	rules  []*rule
}

// Builtin is the policy with no file: the default rules alone.
func Builtin() *Policy { return &Policy{} }

// File is the name of the file the policy was read from; "" for Builtin.
func (p *Policy) File() string {
	if p == nil {
		return ""
	}
	return p.file
}

// Source is the text the policy was parsed from (nil for Builtin), so a
// task can record the very policy it runs under and parse it again.
func (p *Policy) Source() []byte {
	if p == nil {
		return nil
	}
	return p.source
}

// Decide is the decision for call c of task t with p as the task's rules
// over the default rules (Stack): a deny of either wins, and a call they
// allow whose tool or class the task requires approval for
// (Task.RequireApproval) waits for a person instead (RuleRequireApproval).
func (p *Policy) Decide(c Call, t Task) Decision {
	return Stack{Task: p}.Decide(c, t)
}

// decideFile is the decision of the first file rule that matches, that
// rule, and whether one did. It takes its own copies of c and t, which its
// CEL activation points to, so a decision by the defaults alone does not
// move them to the heap.
func (p *Policy) decideFile(c Call, t Task) (Decision, *rule, bool) {
	act := &activation{c: &c, t: &t}
	for _, r := range p.rules {
		if d, ok := r.decide(act); ok {
			return d, r, true
		}
	}
	return Decision{}, nil, false
}

// AlwaysRefused reports whether every call of the tool named tool (of class
// class, from MCP server server, "" for a built-in tool) is refused for task
// t whatever its arguments, with the decision that refuses it, so the tool
// need not be offered to the model at all.
//
// It is conservative: it says true only when, walking the file's rules in
// order, a deny rule is reached that matches the tool by its tool, class
// and server fields alone, has no repository, branch or path field, and has
// no condition or one that reads only tool, class, server, tenant, labels
// and task.* and is true for t — and no earlier rule could match a call of
// the tool and allow it or ask for approval. Any rule that depends on the
// arguments and does not refuse could let a call through, so it stops the
// walk with false. The defaults never refuse a tool whole.
func (p *Policy) AlwaysRefused(tool string, class capstan.Class, server string, t Task) (Decision, bool) {
	if p == nil {
		return Decision{}, false
	}
	c := Call{Tool: tool, Class: class, Server: server}
	act := &activation{c: &c, t: &t}
	for _, r := range p.rules {
		if !r.matchesTool(&c) {
			continue
		}
		if r.dependsOnArguments() {
			if r.effect == Deny {
				continue // refuses some calls; the others go on
			}
			return Decision{}, false // might let some call through
		}
		d, ok := r.decide(act)
		if !ok {
			continue // its condition is false for this task
		}
		return d, d.Refused()
	}
	return Decision{}, false
}

// RuleInfo describes one rule of a file, for `starter policy check`.
type RuleInfo struct {
	Name   string
	Line   int
	Effect Effect
	// Match is the rule's match fields and condition, as one line.
	Match string
}

// String is the rule as `starter policy check` prints it.
func (r RuleInfo) String() string {
	return r.Name + " (line " + itoa(r.Line) + "): " + string(r.Effect) + " " + r.Match
}

// Rules are the file's rules, in order; the defaults follow them.
func (p *Policy) Rules() []RuleInfo {
	if p == nil {
		return nil
	}
	out := make([]RuleInfo, 0, len(p.rules))
	for _, r := range p.rules {
		out = append(out, RuleInfo{Name: r.name, Line: r.line, Effect: r.effect, Match: r.describe()})
	}
	return out
}
