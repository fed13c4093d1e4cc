package policy

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkDecide measures one decision for a compliant github_put_file:
// with the default rules alone, and behind a file of 20 rules whose CEL
// conditions are all evaluated and all false, so the call goes through
// every one of them to the defaults (the worst case of such a file). Each
// condition reads a label, the task's repositories and the tenant, and
// only its last test is false, so none stops early.
func BenchmarkDecide(b *testing.B) {
	var file strings.Builder
	file.WriteString("rules:\n")
	for i := range 20 {
		fmt.Fprintf(&file, "  - name: rule-%d\n    when: labels[?\"env\"].orValue(\"\") == \"prod\" && repository in task.repositories && tenant == \"t%d\"\n    effect: deny\n    reason: r\n", i, i)
	}
	call := putFile("acme/payments", "capstan/fix-typo", "README.md")
	tk := created(task)
	tk.Labels = map[string]string{"env": "prod"}
	for _, bc := range []struct {
		name string
		p    *Policy
	}{
		{"defaults", Builtin()},
		{"cel-20-rules", mustParse(b, file.String())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d := bc.p.Decide(call, tk); d.Rule != RuleAllow {
					b.Fatalf("decision %s", d)
				}
			}
		})
	}
}
