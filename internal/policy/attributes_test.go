package policy

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
)

// A tool's own attributes (tool.Target.Attributes) are the CEL map
// `attributes`: a rule decides on them as on a repository, a missing key
// refuses the call (fail closed) unless the rule reads it optionally, and
// a rule reading them depends on the arguments, so it never refuses the
// tool whole.
func TestAttributesAreReadByConditions(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `rules:
  - name: ops-tickets-need-a-person
    tool: tickets_create
    when: attributes["project"] == "OPS"
    effect: require_approval
  - name: no-big-refunds
    when: int(attributes[?"amount"].orValue("0")) > 100
    effect: deny
    reason: refunds over 100 are a person's
`)
	ticket := func(attrs map[string]string) Call {
		return Call{Tool: "tickets_create", Class: capstan.ClassUnsafe, Writes: true, Attributes: attrs}
	}
	refund := func(attrs map[string]string) Call {
		return Call{Tool: "payments_refund", Class: capstan.ClassConditional, Writes: true, Attributes: attrs}
	}
	for _, tc := range []struct {
		name   string
		call   Call
		effect Effect
		rule   string
		says   string
	}{
		{"an attribute that matches", ticket(map[string]string{"project": "OPS"}), RequireApproval, "ops-tickets-need-a-person", ""},
		{"another value", ticket(map[string]string{"project": "DEV"}), Allow, RuleAllow, ""},
		{"values compare exactly", ticket(map[string]string{"project": "ops"}), Allow, RuleAllow, ""},
		{"a missing key fails closed", ticket(nil), Deny, "ops-tickets-need-a-person", "could not be evaluated"},
		{"an optional read of a missing key", refund(nil), Allow, RuleAllow, ""},
		{"a condition on an attribute's value", refund(map[string]string{"amount": "250"}), Deny, "no-big-refunds", "refunds over 100 are a person's"},
		{"under the limit", refund(map[string]string{"amount": "99"}), Allow, RuleAllow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.call, task)
			if d.Effect != tc.effect || d.Rule != tc.rule || !strings.Contains(d.Reason, tc.says) {
				t.Errorf("decision %s, want %s by %s saying %q", d, tc.effect, tc.rule, tc.says)
			}
		})
	}
	deny := mustParse(t, "rules:\n  - name: no-ops\n    tool: tickets_create\n    when: attributes[?\"project\"].orValue(\"\") == \"OPS\"\n    effect: deny\n    reason: not OPS\n")
	if d, ok := deny.AlwaysRefused("tickets_create", capstan.ClassUnsafe, "", task); ok {
		t.Errorf("a deny rule reading attributes refused the tool whole: %s", d)
	}
}
