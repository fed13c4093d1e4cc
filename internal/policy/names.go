package policy

import (
	"slices"
	"strings"
	"unicode"

	celast "github.com/google/cel-go/common/ast"
)

// RuleRef refuses a call that names HEAD where the repository's default
// branch, which HEAD stands for, is not known: without it no rule could
// tell which branch the call acts on.
const RuleRef = "default/ref"

// branchName is the branch a ref names: "refs/heads/x" and "heads/x" are
// "x", as git reads them; anything else (a commit, HEAD) is itself.
func branchName(ref string) string {
	if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		return b
	}
	if b, ok := strings.CutPrefix(ref, "heads/"); ok {
		return b
	}
	return ref
}

// NamesHead is whether c, or a task whose base is base, names HEAD (in
// any form branchName reads), which the policy reads as the repository's
// default branch: its caller must know that branch, even for a read.
func NamesHead(c Call, base string) bool {
	return slices.ContainsFunc([]string{c.Branch, c.From, c.Into, base}, func(ref string) bool { return branchName(ref) == "HEAD" })
}

// normalize folds what a rule sees of c and t into the one form rules
// compare (docs/design.md §5.8): repository names in lower case, as GitHub
// compares them; every branch and ref as a branch name (branchName), the
// task's base and default branch too, and HEAD as the repository's default
// branch. ok is false, with the refusal, when the call names HEAD and the
// default branch is not known.
func normalize(c Call, t Task) (Call, Task, Decision, bool) {
	c.Repository = strings.ToLower(c.Repository)
	if slicesAnyUpper(t.Repositories) {
		lower := make([]string, len(t.Repositories))
		for i, r := range t.Repositories {
			lower[i] = strings.ToLower(r)
		}
		t.Repositories = lower
	}
	t.DefaultBranch = branchName(t.DefaultBranch)
	if t.DefaultBranch == "HEAD" {
		t.DefaultBranch = ""
	}
	var head []string
	for _, f := range []struct {
		name string
		ref  *string
	}{{"the task's base", &t.Base}, {"branch", &c.Branch}, {"from", &c.From}, {"into", &c.Into}} {
		if *f.ref = branchName(*f.ref); *f.ref != "HEAD" {
			continue
		}
		if t.DefaultBranch == "" {
			head = append(head, f.name)
			continue
		}
		*f.ref = t.DefaultBranch
	}
	if len(head) > 0 {
		return c, t, Decision{Effect: Deny, Rule: RuleRef, Layer: LayerDefault,
			Reason: strings.Join(head, " and ") + " is HEAD, and the default branch of " + orThe(c.Repository) +
				" it stands for is not known here: name the branch"}, false
	}
	// --allow-branch names compare in the same form as the call's branch.
	if len(t.AllowBranches) > 0 {
		allowed := make([]string, len(t.AllowBranches))
		for i, b := range t.AllowBranches {
			allowed[i] = branchName(b)
		}
		t.AllowBranches = allowed
	}
	return c, t, Decision{}, true
}

func slicesAnyUpper(ss []string) bool {
	for _, s := range ss {
		if strings.ToLower(s) != s {
			return true
		}
	}
	return false
}

// repositoryVariables are the condition variables that hold repository
// names, folded to lower case (normalize).
var repositoryVariables = map[string]bool{"repository": true, "task.repositories": true}

// upperRepositoryLiteral is a string literal with upper case that the
// condition a compares with a repository name ("" when there is none):
// once names are folded such a comparison is never true, so a deny rule
// written with it would never refuse. It looks at every function and
// operator one of whose operands is a repository (repository,
// task.repositories, or the variable of a comprehension over
// task.repositories), and at the literals of its other operands.
func upperRepositoryLiteral(a *celast.AST) string {
	refs := a.ReferenceMap()
	isRepo := func(e celast.Expr, vars map[string]bool) bool {
		if e.Kind() == celast.IdentKind && vars[e.AsIdent()] {
			return true
		}
		r, ok := refs[e.ID()]
		return ok && repositoryVariables[r.Name]
	}
	var walk func(e celast.Expr, vars map[string]bool) string
	walk = func(e celast.Expr, vars map[string]bool) string {
		var subs []celast.Expr
		switch e.Kind() {
		case celast.CallKind:
			call := e.AsCall()
			operands := call.Args()
			if call.IsMemberFunction() {
				operands = append([]celast.Expr{call.Target()}, operands...)
			}
			for i, o := range operands {
				if !isRepo(o, vars) {
					continue
				}
				for j, other := range operands {
					if j != i {
						if lit := upperLiteral(other); lit != "" {
							return lit
						}
					}
				}
			}
			subs = operands
		case celast.ComprehensionKind:
			comp := e.AsComprehension()
			if lit := walk(comp.IterRange(), vars); lit != "" {
				return lit
			}
			inner := vars
			if isRepo(comp.IterRange(), vars) {
				inner = map[string]bool{comp.IterVar(): true}
				for k := range vars {
					inner[k] = true
				}
			}
			for _, s := range []celast.Expr{comp.AccuInit(), comp.LoopCondition(), comp.LoopStep(), comp.Result()} {
				if lit := walk(s, inner); lit != "" {
					return lit
				}
			}
		case celast.ListKind:
			subs = e.AsList().Elements()
		case celast.SelectKind:
			subs = []celast.Expr{e.AsSelect().Operand()}
		case celast.MapKind:
			for _, en := range e.AsMap().Entries() {
				m := en.AsMapEntry()
				subs = append(subs, m.Key(), m.Value())
			}
		}
		for _, s := range subs {
			if lit := walk(s, vars); lit != "" {
				return lit
			}
		}
		return ""
	}
	return walk(a.Expr(), map[string]bool{})
}

// upperLiteral is a string literal in e (itself, or an element of a list
// or of a conditional in it) that has an upper-case letter; "" when none.
func upperLiteral(e celast.Expr) string {
	switch e.Kind() {
	case celast.LiteralKind:
		if s, ok := e.AsLiteral().Value().(string); ok && strings.ContainsFunc(s, unicode.IsUpper) {
			return s
		}
	case celast.ListKind:
		for _, el := range e.AsList().Elements() {
			if lit := upperLiteral(el); lit != "" {
				return lit
			}
		}
	case celast.CallKind:
		if call := e.AsCall(); call.FunctionName() == "_?_:_" {
			for _, a := range call.Args()[1:] {
				if lit := upperLiteral(a); lit != "" {
					return lit
				}
			}
		}
	}
	return ""
}
