package policy

import "github.com/capstanhq/capstan"

// BuiltinTool is what the policy needs to know of a built-in tool without
// its arguments: its class, and whether it creates a branch. A test in
// internal/tools/github checks this table against the tools themselves.
type BuiltinTool struct {
	Class         capstan.Class
	CreatesBranch bool
}

// BuiltinTools are the built-in GitHub tools by name, and the Call fields
// each fills from its typed arguments (every one fills Tool, Class and
// Repository, its "repo"; Server stays empty; Writes is true for every
// class but read_only):
//
//	github_get_file             Path (path), Branch (ref; "" reads the default branch)
//	github_list_pull_requests   nothing more (head and base only filter the list)
//	github_create_branch        Branch (branch), From (from), CreatesBranch
//	github_put_file             Branch (branch), Path (path)
//	github_create_pull_request  Branch (head), Into (base)
//	github_comment              nothing more (an issue or pull request number)
//
// A pull request's Branch is its head, so default/base-branch refuses one
// proposed from the base branch itself, never one into it.
//
// The Slack delivery of a task's answer is not a tool the model calls and
// is not decided here.
var BuiltinTools = map[string]BuiltinTool{
	"github_get_file":            {Class: capstan.ClassReadOnly},
	"github_list_pull_requests":  {Class: capstan.ClassReadOnly},
	"github_create_branch":       {Class: capstan.ClassConditional, CreatesBranch: true},
	"github_put_file":            {Class: capstan.ClassIdempotent},
	"github_create_pull_request": {Class: capstan.ClassConditional},
	"github_comment":             {Class: capstan.ClassUnsafe},
}
