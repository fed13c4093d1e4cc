package activities_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
)

// TestToolPreviewsNameWhatCapstanWroteNotWhatItRead: the preview that goes
// into history says how much a read read of what, never the content; a
// write's names what it wrote.
func TestToolPreviewsNameWhatCapstanWroteNotWhatItRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	run := func(in contract.ExecuteToolInput) contract.ExecuteToolResult {
		t.Helper()
		return executeTool(t, f, in)
	}
	read := run(contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_1",
		OperationID: "default:T1:T1/t1:github_get_file:1", Tool: "github_get_file",
		Arguments: f.args(t, `{"repo":"acme/app","path":"README.md","ref":"main"}`)})
	if want := regexp.MustCompile(`^read [0-9,]+ bytes: get_file acme/app README\.md@main$`); read.State != capstan.OutcomeSucceeded || !want.MatchString(read.Preview) {
		t.Errorf("read = %+v, want its preview to say how much it read of what", read)
	}
	if strings.Contains(read.Preview, "# app") {
		t.Errorf("the read's preview %q holds the file's content", read.Preview)
	}
	branch := run(contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_2",
		OperationID: "default:T1:github_create_branch:branch:create:acme/app:agent/p", Tool: "github_create_branch",
		Arguments: f.args(t, `{"repo":"acme/app","branch":"agent/p","from":"main"}`)})
	if !strings.Contains(branch.Preview, "refs/heads/agent/p") {
		t.Errorf("branch = %+v, want its preview to name the branch it made", branch)
	}
}
