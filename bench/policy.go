package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	"github.com/capstanhq/capstan/internal/policy"
)

// policyRow is what the task's policy costs one tool call (docs/design.md
// §5.8): its decision in memory, with the defaults alone and behind a file
// of CEL rules that all run, and the decision's record in the ledger,
// which ExecuteTool writes once per operation.
type policyRow struct {
	defaults, cel, record time.Duration
	celRules              int
	err                   error
}

// policyCELRules is how many rules the measured file has: each condition
// reads a label, the task's repositories and the tenant, and only its last
// test is false, so every rule runs before the defaults decide.
const policyCELRules = 20

// runPolicy measures the decision of a compliant github_put_file.
func runPolicy(ctx context.Context) policyRow {
	row := policyRow{celRules: policyCELRules}
	var file strings.Builder
	file.WriteString("rules:\n")
	for i := range policyCELRules {
		fmt.Fprintf(&file, "  - name: rule-%d\n    when: labels[?\"env\"].orValue(\"\") == \"prod\" && repository in task.repositories && tenant == \"t%d\"\n    effect: deny\n    reason: r\n", i, i)
	}
	cel, err := policy.Parse("bench.yaml", []byte(file.String()))
	if err != nil {
		row.err = err
		return row
	}
	call := policy.Call{Tool: "github_put_file", Class: capstan.ClassIdempotent, Writes: true,
		Repository: "acme/payments", Branch: "capstan/fix-typo", Path: "README.md"}
	task := policy.Task{Repositories: []string{"acme/payments"}, Base: "main", Tenant: "default", Labels: map[string]string{"env": "prod"},
		CreatedBranches: []policy.Branch{{Repository: "acme/payments", Name: "capstan/fix-typo"}}}
	decide := func(p *policy.Policy) time.Duration {
		r := testing.Benchmark(func(b *testing.B) {
			for b.Loop() {
				if d := p.Decide(call, task); !d.Allowed() {
					b.Fatalf("decision %s", d)
				}
			}
		})
		return time.Duration(r.NsPerOp())
	}
	row.defaults, row.cel = decide(policy.Builtin()), decide(cel)
	rec := testing.Benchmark(func(b *testing.B) {
		s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "ledger.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		n := 0
		for b.Loop() {
			n++
			if _, _, err := s.RecordDecision(ctx, ledger.Decision{OperationID: fmt.Sprintf("default:T:op-%d", n), Tenant: "default",
				TaskID: "T", Tool: call.Tool, Effect: "allow", Rule: "default/allow", Reason: "allowed"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	row.record = time.Duration(rec.NsPerOp())
	return row
}

// policyTable writes the policy's cost per tool call beside the demo
// task's p50 at N = 1 on one worker (three tool calls a task).
func (r *results) policyTable(p func(string, ...any)) {
	p("")
	p("## The policy's cost per tool call")
	p("")
	if r.policy.err != nil {
		p("Not measured: %v", r.policy.err)
		return
	}
	p("A compliant `github_put_file` decided in memory (`policy.Decide`), and the decision's ledger record written alone (SQLite, `RecordDecision`): what a call the policy refuses or holds for approval pays. A call it lets through records its decision in the claim's own transaction (`ClaimRequest.Decision`), so it pays no write of its own. The demo task makes three tool calls, all let through.")
	p("")
	var task time.Duration
	if s := r.load[loadKey{kindCapstan, 1, 1}]; s != nil {
		task = s.p50()
	}
	share := func(d time.Duration) string {
		if task <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.3f %%", 100*float64(3*d)/float64(task))
	}
	p("| what | per tool call | three calls / demo task p50 (%s) |", ms(task))
	p("| --- | --- | --- |")
	p("| decision, default rules | %s | %s |", r.policy.defaults, share(r.policy.defaults))
	p("| decision, %d CEL rules all evaluated | %s | %s |", r.policy.celRules, r.policy.cel, share(r.policy.cel))
	p("| the decision's ledger record written alone (refused or held calls) | %s | none: the demo task's calls are let through |", r.policy.record)
}
