package tool

import "encoding/json"

// Target is what a call acts on, as the task's policy sees it
// (internal/policy.Call, docs/design.md §5.8): read from the tool's own
// typed arguments, never from the raw JSON by anyone else. Fields a tool
// has no use for stay empty.
type Target struct {
	// Repository is OWNER/NAME of the repository read or written.
	Repository string
	// Branch is the branch written to, created, proposed from (a pull
	// request's head), or read at.
	Branch string
	// Path is the file read or written.
	Path string
	// From is the branch or commit a created branch starts from.
	From string
	// Into is the branch a pull request merges into.
	Into string
	// CreatesBranch says the call creates Branch.
	CreatesBranch bool
	// Attributes are what else the call acts on, in the tool's own words:
	// a project, an amount, an environment. A policy rule's condition
	// reads them as the map `attributes` (`attributes["project"] ==
	// "OPS"`); like Repository they come from the call's arguments, and
	// compare exactly. A rule that reads a key the map lacks fails, which
	// refuses the call (`attributes[?"k"].orValue("")` does not).
	Attributes map[string]string
}

// Targeted is a tool that can say what a call acts on. A tool that is not
// (an MCP tool, say) is decided by the policy on its name, class and
// server alone.
type Targeted interface {
	// Target parses args as Execute does and names what they act on. It
	// does no I/O; arguments Identify rejects give its error.
	Target(args json.RawMessage) (Target, error)
}

// BranchCreator is a tool whose calls create a branch (Target.CreatesBranch
// true). The task's policy lets a task write only onto branches it
// created, which the activity reads from the ledger: the operations of the
// tool that succeeded, found by their business keys.
type BranchCreator interface {
	// CreatedBranch names the branch an operation of the tool creates,
	// from its business key (Identity.BusinessKey): Repository and Branch
	// set; false for a key the tool did not give.
	CreatedBranch(businessKey string) (Target, bool)
}
