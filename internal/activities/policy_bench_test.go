package activities_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// celFile is a policy file of 12 rules (about 2 KB) whose CEL conditions
// read a label and the path, all false for the benchmark's call, so the
// call is evaluated against every one before the defaults.
func celFile() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 12 {
		fmt.Fprintf(&b, "  - name: rule-%02d\n    tool: github_put_file\n    when: labels[?\"env\"].orValue(\"\") == \"prod\" && path.startsWith(\"docs/part-%02d/\")\n    effect: deny\n    reason: part %02d is frozen in prod\n", i, i, i)
	}
	return b.String()
}

// BenchmarkPolicyDecisionPerToolCall is the policy's cost per tool call
// as ExecuteTool pays it (docs/design.md §5.8): the decision — the
// compiled policy from the worker's cache, the call's target from its
// arguments, Decide — and its record in the ledger (one SQLite write, its
// fsync included), with the default rules alone and behind a 12-rule CEL
// file; beside it, a whole ExecuteTool of a read against the in-process
// sandbox (claim, call, record), the cheapest tool call there is.
func BenchmarkPolicyDecisionPerToolCall(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	args := []byte(`{"repo":"acme/app","branch":"capstan/x","path":"src/main.go","content":"c","message":"m"}`)
	src := celFile()
	for _, bc := range []struct {
		name string
		tp   *contract.TaskPolicy
	}{
		{"defaults", &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Labels: map[string]string{"env": "prod"}}},
		{"cel-file-12-rules", &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Labels: map[string]string{"env": "prod"},
			File: "policy.yaml", SourceRef: ledger.ItemRef(contract.PolicyItem("policy.yaml", src)), Source: src}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				n++
				in := contract.ExecuteToolInput{Tenant: "default", TaskID: "B", OperationID: fmt.Sprintf("B:%s:%d", bc.name, n),
					Tool: githubtools.NamePutFile, Policy: bc.tp}
				d, err := f.acts.Decide(ctx, in, args)
				if err != nil || d.Refused {
					b.Fatalf("decision %+v, %v", d, err)
				}
			}
		})
	}
	b.Run("ledger-record-only", func(b *testing.B) {
		n := 0
		for b.Loop() {
			n++
			if _, _, err := f.ledger.RecordDecision(ctx, ledger.Decision{OperationID: fmt.Sprintf("B:record:%d", n), TaskID: "B",
				Tool: githubtools.NamePutFile, Effect: "allow", Rule: "default/allow", Reason: "allowed"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("execute-tool-read", func(b *testing.B) {
		ref := f.args(b, `{"repo":"acme/app","path":"README.md","ref":"main"}`)
		n := 0
		for b.Loop() {
			n++
			in := contract.ExecuteToolInput{Tenant: "default", TaskID: "B", TurnID: "B/t1", ToolCallID: "c", OperationID: fmt.Sprintf("B:read:%d", n),
				Tool: githubtools.NameGetFile, Arguments: ref, Policy: &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main"}}
			if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
