package policy

import (
	"slices"
	"sort"
	"strings"

	"github.com/capstanhq/capstan"
)

// A rule's tool field, or a --require-approval, that names no tool the
// worker has would never match: a deny there refuses nothing, an approval
// asks for nothing. Both are refused instead (docs/design.md §5.8), by the
// worker that first sees the task's policy — which alone knows its MCP
// tools, by their registered (cut and hashed) names — and, for the
// built-in tools, by the starter.

// CheckTools refuses p when one of its rules' tool globs matches none of
// tools, the worker's tool names: a *FileError naming the file, the line
// and the rule, and the tools there are.
func (p *Policy) CheckTools(tools []string) error {
	return p.checkTools(tools, func(string) bool { return false })
}

// CheckBuiltinTools is CheckTools for a starter, which knows the built-in
// tools (BuiltinTools) and neither a worker's MCP tools nor its own Go
// tools (tool.New): a glob is checked only when every name it could match
// starts with BuiltinPrefix; any other — an MCP tool's name
// (mcp__SERVER__TOOL), a worker's own tool's — is left for the worker to
// check.
func (p *Policy) CheckBuiltinTools() error {
	return p.checkTools(builtinNames(), couldBeWorkers)
}

// BuiltinPrefix starts the name of every built-in tool, and of no other:
// tool.New refuses it.
const BuiltinPrefix = "github_"

func (p *Policy) checkTools(tools []string, later func(glob string) bool) error {
	if p == nil {
		return nil
	}
	for _, r := range p.rules {
		for _, g := range r.match["tool"] {
			if !matchesAny(g, tools) && !later(g) {
				return &FileError{File: p.file, Line: r.toolLine, Rule: quote(r.name),
					Problem: "tool " + quote(g) + " matches none of this worker's tools (" + strings.Join(sorted(tools), ", ") +
						"), so the rule would never apply"}
			}
		}
	}
	return nil
}

// CheckApprovalNames refuses a --require-approval that is neither a safety
// class nor one of tools, the worker's tool names, with one sentence.
func CheckApprovalNames(names, tools []string) error {
	for _, n := range names {
		if slices.Contains(classes, capstan.Class(n)) || slices.Contains(tools, n) {
			continue
		}
		return &ApprovalNameError{Name: n, Tools: sorted(tools)}
	}
	return nil
}

// ApprovalNameError is a --require-approval that names no tool the worker
// has and no class.
type ApprovalNameError struct {
	Name  string
	Tools []string
}

func (e *ApprovalNameError) Error() string {
	return "--require-approval " + quote(e.Name) + " names none of this worker's tools (" + strings.Join(e.Tools, ", ") +
		") and no class, so no call would wait for a person"
}

func matchesAny(glob string, names []string) bool {
	for _, n := range names {
		if glob == n || !isLiteral(glob) && globMatch(glob, n) {
			return true
		}
	}
	return false
}

// couldBeWorkers is whether glob could match a tool only a worker knows
// (an MCP tool, a Go tool of its own): its part before the first wildcard
// does not start with BuiltinPrefix.
func couldBeWorkers(glob string) bool {
	lit := glob
	if i := strings.IndexAny(glob, "*?"); i >= 0 {
		lit = glob[:i]
	}
	return !strings.HasPrefix(lit, BuiltinPrefix)
}

func builtinNames() []string {
	out := make([]string, 0, len(BuiltinTools))
	for n := range BuiltinTools {
		out = append(out, n)
	}
	return out
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	sort.Strings(out)
	return out
}
