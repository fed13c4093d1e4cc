package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// The bench measures the policy's cost per tool call and reports it beside
// the task's time: a CEL file that runs all its rules costs more than the
// defaults alone, and the ledger record more than either.
func TestPolicyCostIsMeasuredAndReported(t *testing.T) {
	row := runPolicy(context.Background())
	if row.err != nil {
		t.Fatal(row.err)
	}
	t.Logf("per tool call: defaults %s, %d CEL rules %s, ledger record %s", row.defaults, row.celRules, row.cel, row.record)
	if row.defaults <= 0 || row.cel <= row.defaults || row.record <= row.cel {
		t.Errorf("defaults %s, CEL %s, record %s: want 0 < defaults < CEL < record", row.defaults, row.cel, row.record)
	}
	var w strings.Builder
	(&results{policy: row, load: loadResults{}}).policyTable(func(f string, a ...any) { w.WriteString(strings.TrimSpace(fmt.Sprintf(f, a...)) + "\n") })
	for _, want := range []string{"## The policy's cost per tool call", "| decision, default rules |", "| decision, 20 CEL rules all evaluated |", "| the decision's ledger record written alone (refused or held calls) | "} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, w.String())
		}
	}
}
