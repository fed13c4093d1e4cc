package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/workflows"
)

// gc refuses bad input with one line and exit 2, before it opens anything.
func TestGCRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"gc"},
		{"gc", "--older-than", "soon"},
		{"gc", "--older-than", "-1h"},
		{"gc", "--older-than", "1h", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
		if code != 2 || strings.Count(strings.TrimRight(stderr.String(), "\n"), "\n") != 0 || stdout.Len() != 0 {
			t.Errorf("starter %v: exit %d, stdout %q, stderr %q; want exit 2 and one line on stderr", args, code, stdout.String(), stderr.String())
		}
	}
}

// Labels and short lines leave out the chain scope that ledger keys carry
// (workflows.ChainScope), as they leave out the task id.
func TestLabelsLeaveOutTheChainScope(t *testing.T) {
	t.Parallel()
	const sc = "~3fa9c0d1e2b4"
	op := workflows.OperationRecord{OperationID: "default:T:" + sc + ":t2:github_get_file:1", TurnID: "T/" + sc + "/t2"}
	if got := opLabel("T", op); got != "github_get_file (t2 #1)" {
		t.Errorf("opLabel = %q, want %q", got, "github_get_file (t2 #1)")
	}
	line := "2026-11-30T14:03:22Z operation default:T:" + sc + ":github_create_branch:branch:create:acme/x:feat is unknown while T/" + sc + "/t2/a1 waited"
	if got, want := shortLine("T", line), "14:03:22 operation [github_create_branch acme/x feat] is unknown while t2/a1 waited"; got != want {
		t.Errorf("shortLine =\n%q\nwant\n%q", got, want)
	}
	if got := shortAttempt("T", "T/"+sc+"/t1/a2"); got != "t1/a2" {
		t.Errorf("shortAttempt = %q, want t1/a2", got)
	}
	res := workflows.TaskResult{TaskID: "T", Operations: []workflows.OperationRecord{op}}
	if got := shortOperationID(res, op.OperationID); got != "t2:github_get_file:1" {
		t.Errorf("shortOperationID = %q, want t2:github_get_file:1", got)
	}
}
