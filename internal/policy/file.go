package policy

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"go.yaml.in/yaml/v3"

	"github.com/capstanhq/capstan"
)

// A policy file (CAPSTAN_POLICY) is YAML: a mapping whose one key, rules,
// is a list of rules tried in order:
//
//	rules:
//	  - name: prod-needs-approval          # required, unique
//	    tool: github_create_pull_request   # match fields: a glob, or a list of globs (any of them)
//	    when: labels[?"env"].orValue("") == "prod"   # optional CEL condition, a bool
//	    effect: require_approval           # allow | deny | require_approval
//	  - name: no-vendor
//	    path: "vendor/**"
//	    effect: deny
//	    reason: vendored code is updated by the dependency bot   # required for deny
//
// The match fields are tool, class (read_only, idempotent, conditional,
// unsafe), server, repository (without regard to case), branch and path. A
// rule matches a call when each field it has matches (a field the call has
// no value for matches nothing) and its condition is true. An allow rule
// of the worker's file may name one default rule it loosens for the calls
// it decides (override: default/base-branch, say; Stack); in a task's file
// the key lifts nothing.

// matchKeys are a rule's match fields, in the order they are shown.
var matchKeys = []string{"tool", "class", "server", "repository", "branch", "path"}

// ruleKeys are every key a rule may have.
var ruleKeys = append([]string{"name", "when", "effect", "reason", "override"}, matchKeys...)

// FileError is a policy file that was refused: one sentence naming the
// file, the line and, when the problem is in one, the rule.
type FileError struct {
	File string
	Line int // 1-based; 0 when the problem has no line (the file is unreadable)
	// Rule is the rule's name, or "rule N" (1-based) for one without a
	// name; "" when the problem is not in a rule.
	Rule    string
	Problem string
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString("policy file " + e.File)
	if e.Line > 0 {
		b.WriteString(", line " + strconv.Itoa(e.Line))
	}
	if e.Rule != "" {
		b.WriteString(", rule " + e.Rule)
	}
	b.WriteString(": " + e.Problem)
	return b.String()
}

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &FileError{File: path, Problem: "cannot be read: " + err.Error()}
	}
	return Parse(path, data)
}

// Parse compiles the policy file named name whose text is data. Every
// condition is compiled here, once; the first problem is returned as a
// *FileError.
func Parse(name string, data []byte) (*Policy, error) {
	fail := func(line int, rule, format string, args ...any) error {
		return &FileError{File: name, Line: line, Rule: rule, Problem: fmt.Sprintf(format, args...)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlError(err)
		return nil, fail(line, "", "is not YAML: %s", msg)
	}
	p := &Policy{file: name, source: slices.Clone(data)}
	if len(doc.Content) == 0 {
		return p, nil // an empty file: the defaults alone
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, fail(top.Line, "", "is not a mapping with a rules list")
	}
	var list *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Value != "rules" {
			return nil, fail(k.Line, "", "unknown key %q (the file has one key, rules)", k.Value)
		}
		if list != nil {
			return nil, fail(k.Line, "", "rules is given twice")
		}
		list = v
	}
	if list == nil || list.Tag == "!!null" {
		return p, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fail(list.Line, "", "rules is not a list")
	}
	env, err := newEnv()
	if err != nil {
		return nil, fail(0, "", "cannot be compiled: %v", err)
	}
	seen := map[string]int{}
	for i, n := range list.Content {
		r, err := parseRule(env, n, i+1, fail)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[r.name]; dup {
			return nil, fail(r.line, quote(r.name), "the name is already that of the rule at line %d", first)
		}
		seen[r.name] = r.line
		p.rules = append(p.rules, r)
	}
	return p, nil
}

// parseRule reads the index-th rule (1-based) from n.
func parseRule(env *cel.Env, n *yaml.Node, index int, fail func(int, string, string, ...any) error) (*rule, error) {
	label := "rule " + strconv.Itoa(index)
	if n.Kind != yaml.MappingNode {
		return nil, fail(n.Line, label, "is not a mapping of name, effect and match fields")
	}
	// The name first, so every other problem can name the rule.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode && strings.TrimSpace(v.Value) != "" {
			label = quote(v.Value)
		}
	}
	r := &rule{line: n.Line, match: map[string][]string{}}
	var whenLine, effectLine int
	keyLines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.Contains(ruleKeys, k.Value) {
			return nil, fail(k.Line, label, "unknown key %q (a rule has %s)", k.Value, strings.Join(ruleKeys, ", "))
		}
		if first, dup := keyLines[k.Value]; dup {
			return nil, fail(k.Line, label, "%s is given twice (first at line %d)", k.Value, first)
		}
		keyLines[k.Value] = k.Line
		if slices.Contains(matchKeys, k.Value) {
			globs, err := globs(v)
			if err != nil {
				return nil, fail(v.Line, label, "%s %v", k.Value, err)
			}
			for _, c := range globs {
				if k.Value == "class" && !slices.Contains(classes, capstan.Class(c)) {
					return nil, fail(v.Line, label, "class %q is none of read_only, idempotent, conditional, unsafe", c)
				}
			}
			r.match[k.Value] = globs
			if k.Value == "tool" {
				r.toolLine = v.Line
			}
			continue
		}
		if v.Kind != yaml.ScalarNode {
			return nil, fail(v.Line, label, "%s is not a string", k.Value)
		}
		switch k.Value {
		case "name":
			r.name = strings.TrimSpace(v.Value)
		case "when":
			r.whenText, whenLine = v.Value, v.Line
		case "effect":
			r.effect, effectLine = Effect(v.Value), v.Line
		case "reason":
			r.reason = strings.TrimSpace(v.Value)
		case "override":
			r.override = strings.TrimSpace(v.Value)
		}
	}
	switch {
	case r.name == "":
		return nil, fail(n.Line, label, "has no name")
	case strings.HasPrefix(r.name, "default/"):
		return nil, fail(n.Line, label, "names starting with default/ are the default rules'")
	case r.effect == "":
		return nil, fail(n.Line, label, "has no effect (allow, deny or require_approval)")
	case r.effect != Allow && r.effect != Deny && r.effect != RequireApproval:
		return nil, fail(effectLine, label, "effect %q is none of allow, deny, require_approval", r.effect)
	case r.effect == Deny && r.reason == "":
		return nil, fail(n.Line, label, "a deny rule needs a reason, which the model is told")
	case r.override != "" && !slices.Contains(overridable(), r.override):
		return nil, fail(keyLines["override"], label, "override %q is none of the default rules that refuse: %s", r.override, strings.Join(overridable(), ", "))
	case r.override != "" && r.effect != Allow:
		return nil, fail(keyLines["override"], label, "a rule with override loosens a default, so its effect is allow, not %s", r.effect)
	}
	for i, g := range r.match["repository"] {
		r.match["repository"][i] = strings.ToLower(g)
	}
	if strings.TrimSpace(r.whenText) != "" {
		cond, err := compileCondition(env, r.whenText)
		if err != nil {
			return nil, fail(whenLine, label, "%v", err)
		}
		r.when = cond
	}
	return r, nil
}

// overridable are the default rules a worker's file may lift (override):
// every one but those that allow.
func overridable() []string {
	var out []string
	for _, n := range BuiltinRules {
		if n != RuleRead && n != RuleAllow {
			out = append(out, n)
		}
	}
	return out
}

var classes = []capstan.Class{capstan.ClassReadOnly, capstan.ClassIdempotent, capstan.ClassConditional, capstan.ClassUnsafe}

// globs reads a match field: a string, or a list of strings.
func globs(v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Value == "" {
			return nil, errors.New("is empty")
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			return nil, errors.New("is an empty list")
		}
		out := make([]string, 0, len(v.Content))
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode || e.Value == "" {
				return nil, errors.New("lists something that is not a non-empty string")
			}
			out = append(out, e.Value)
		}
		return out, nil
	}
	return nil, errors.New("is neither a string nor a list of strings")
}

// yamlError is the line and message of a YAML syntax error ("yaml: line
// 3: mapping values are not allowed in this context").
func yamlError(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil {
				return line, text
			}
		}
	}
	return 0, oneLine(msg)
}

func quote(s string) string { return strconv.Quote(s) }

func itoa(n int) string { return strconv.Itoa(n) }
