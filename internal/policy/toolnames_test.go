package policy

import (
	"errors"
	"strings"
	"testing"
)

// A rule's tool glob that matches none of the worker's tools is refused
// with one sentence naming the file, the line of the field and the rule;
// the starter, knowing only the built-in tools, leaves what could be an
// MCP tool's name, or a worker's own Go tool's, to the worker.
func TestToolNamesAreChecked(t *testing.T) {
	t.Parallel()
	worker := []string{"github_comment", "github_put_file", "mcp__docs__search", "mcp__long_8f3a2c1d"}
	for _, tc := range []struct {
		name, tool string
		worker     bool // the worker accepts it
		starter    bool // the starter accepts it
	}{
		{"a built-in tool", "github_put_file", true, true},
		{"a glob over built-in tools", "github_*", true, true},
		{"an MCP tool the worker has", "mcp__docs__search", true, true},
		{"an MCP tool by its cut and hashed name", "mcp__long_8f3a2c1d", true, true},
		{"a glob over MCP tools", "mcp__docs__*", true, true},
		{"a misspelt built-in tool", "github_put_flie", false, false},
		{"an MCP tool the worker lacks", "mcp__tickets__create", false, true},
		{"a glob matching no tool, which a worker might have", "gitlab_*", false, true},
		{"a worker's own Go tool", "tickets_create", false, true},
		{"a glob under the built-ins' prefix matching none", "github_merge_*", false, false},
		{"a glob that may match an MCP tool", "*search", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, "rules:\n  - name: r\n    effect: deny\n    reason: no\n    tool: ['"+tc.tool+"']\n")
			err := p.CheckTools(worker)
			var fe *FileError
			if tc.worker != (err == nil) || err != nil && (!errors.As(err, &fe) || fe.Line != 5 || fe.Rule != `"r"` ||
				!strings.Contains(fe.Problem, `tool "`+tc.tool+`" matches none of this worker's tools (github_comment, github_put_file, mcp__docs__search`)) {
				t.Errorf("CheckTools = %v, want accepted %v (a refusal naming line 5, rule r and the tools)", err, tc.worker)
			}
			if err := p.CheckBuiltinTools(); tc.starter != (err == nil) {
				t.Errorf("CheckBuiltinTools = %v, want accepted %v", err, tc.starter)
			}
		})
	}
	if err := CheckApprovalNames([]string{"unsafe", "github_comment", "mcp__docs__search"}, worker); err != nil {
		t.Errorf("a class, a built-in tool and an MCP tool: %v", err)
	}
	err := CheckApprovalNames([]string{"github_comment", "mcp__tickets__create"}, worker)
	if err == nil || !strings.HasPrefix(err.Error(), `--require-approval "mcp__tickets__create" names none of this worker's tools (github_comment, `) {
		t.Errorf("an MCP tool the worker lacks: %v", err)
	}
}
