package policy

import (
	"strings"
)

// rule is one compiled rule of a policy file.
type rule struct {
	name   string
	line   int
	effect Effect
	reason string
	// match holds the globs of each match field the rule has (matchKeys);
	// repository globs are lower-case.
	match    map[string][]string
	whenText string
	when     *condition // nil without a condition
	// toolLine is the line of the tool field; 0 without one.
	toolLine int
	// override is the default rule this allow rule lifts for the calls it
	// decides, when it is of the worker's file (Stack); "" for none.
	override string
}

// decide is the rule's decision for the call and task of act, and whether
// it matched.
func (r *rule) decide(act *activation) (Decision, bool) {
	c := act.c
	if !r.matchesTool(c) || !r.matchesArguments(c) {
		return Decision{}, false
	}
	if r.when != nil {
		ok, err := r.when.eval(act)
		if err != nil {
			// Fail closed: a condition that cannot be evaluated refuses.
			return deny(r.name, "the condition of rule "+r.name+" could not be evaluated for this call ("+oneLine(err.Error())+
				"), so it is refused; a missing label reads as labels[?\"KEY\"].orValue(\"\"), a missing attribute as attributes[?\"KEY\"].orValue(\"\")"), true
		}
		if !ok {
			return Decision{}, false
		}
	}
	switch r.effect {
	case Deny:
		return deny(r.name, r.reason), true
	case RequireApproval:
		return Decision{Effect: RequireApproval, Rule: r.name, Reason: r.explain("requires a person's approval of " + c.Tool)}, true
	}
	return Decision{Effect: Allow, Rule: r.name, Reason: r.explain("allows " + c.Tool)}, true
}

// explain is the rule's reason, or "rule NAME (line N) does".
func (r *rule) explain(does string) string {
	if r.reason != "" {
		return r.reason
	}
	return "rule " + r.name + " (line " + itoa(r.line) + ") " + does
}

// matchesTool is whether the rule's tool, class and server fields match c.
func (r *rule) matchesTool(c *Call) bool {
	return r.field("tool", c.Tool) && r.field("class", string(c.Class)) && r.field("server", c.Server)
}

// matchesArguments is whether the rule's repository, branch and path
// fields match c.
func (r *rule) matchesArguments(c *Call) bool {
	return r.field("repository", strings.ToLower(c.Repository)) && r.field("branch", c.Branch) && r.field("path", c.Path)
}

// field is whether value matches one of the rule's globs for key; true when
// the rule has no such field, false when value is empty and it has.
func (r *rule) field(key, value string) bool {
	globs, ok := r.match[key]
	if !ok {
		return true
	}
	if value == "" {
		return false
	}
	for _, g := range globs {
		if isLiteral(g) {
			if g == value {
				return true
			}
		} else if globMatch(g, value) {
			return true
		}
	}
	return false
}

// dependsOnArguments is whether the rule matches a call of a tool
// can depend on the call's arguments: it has a repository, branch or path
// field, or its condition reads one of them or another variable that comes
// from the arguments (from, into, creates_branch, attributes).
func (r *rule) dependsOnArguments() bool {
	for _, k := range []string{"repository", "branch", "path"} {
		if _, ok := r.match[k]; ok {
			return true
		}
	}
	return r.when != nil && r.when.arguments
}

// describe is the rule's match fields and condition, as one line.
func (r *rule) describe() string {
	var parts []string
	for _, k := range matchKeys {
		if g, ok := r.match[k]; ok {
			parts = append(parts, k+"="+strings.Join(g, "|"))
		}
	}
	if r.when != nil {
		parts = append(parts, "when "+strings.Join(strings.Fields(r.whenText), " "))
	}
	if r.override != "" {
		parts = append(parts, "override "+r.override)
	}
	if len(parts) == 0 {
		return "every call"
	}
	return strings.Join(parts, " ")
}
