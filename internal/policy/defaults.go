package policy

import (
	"path"
	"strings"
)

// The names of the default rules, which decisions and metrics carry. They
// are stable: dashboards and alerts key on them.
const (
	// RuleRepository refuses a call of a repository that is not one of
	// the task's.
	RuleRepository = "default/repository"
	// RuleBaseBranch refuses a write to the task's base branch or the
	// repository's default branch.
	RuleBaseBranch = "default/base-branch"
	// RuleBranchPrefix refuses to create a branch without the task's
	// prefix.
	RuleBranchPrefix = "default/branch-prefix"
	// RuleWorkflowFiles refuses a write under .github/workflows/.
	RuleWorkflowFiles = "default/workflow-files"
	// RuleRead allows a read of the task's repositories (or of none).
	RuleRead = "default/read"
	// RuleAllow allows a write that no rule refused.
	RuleAllow = "default/allow"
	// RuleRequireApproval asks a person to approve a call the rules allow
	// whose tool or class the task was started with --require-approval
	// for (Task.RequireApproval). It is not one of BuiltinRules: it
	// applies after them, and after a file's rules.
	RuleRequireApproval = "task/require-approval"
)

// BuiltinRules are the default rules' names, in the order they are tried
// after the file's rules.
var BuiltinRules = []string{RuleRepository, RuleBaseBranch, RuleBranchPrefix, RuleWorkflowFiles, RuleRead, RuleAllow}

// workflowDir is where GitHub Actions reads workflows from: a file there
// can run code with the repository's secrets.
const workflowDir = ".github/workflows/"

// decideDefaults applies the default rules to c, in BuiltinRules' order,
// but the one the worker's file lifted for it (Task.applies).
func decideDefaults(c Call, t Task) Decision {
	if t.applies(RuleRepository) && c.Repository != "" && !t.hasRepository(c.Repository) {
		return deny(RuleRepository, c.Repository+" is outside this task's repositories: "+repositories(t))
	}
	writes := c.writes()
	if t.applies(RuleBaseBranch) && writes && c.Branch != "" {
		switch {
		case t.Base != "" && c.Branch == t.Base:
			return deny(RuleBaseBranch, c.Branch+" is this task's base branch, which it never writes to: write to a branch starting with "+
				t.prefix()+" and open a pull request into "+t.Base)
		case t.DefaultBranch != "" && c.Branch == t.DefaultBranch:
			return deny(RuleBaseBranch, c.Branch+" is the default branch of "+orThe(c.Repository)+", which this task never writes to: write to a branch starting with "+
				t.prefix()+" and open a pull request into it")
		}
	}
	if t.applies(RuleBranchPrefix) && c.CreatesBranch && !strings.HasPrefix(c.Branch, t.prefix()) {
		return deny(RuleBranchPrefix, "branch "+quoteEmpty(c.Branch)+" does not start with "+t.prefix()+
			", which every branch this task creates must: name it "+t.prefix()+strings.TrimPrefix(c.Branch, "/"))
	}
	if t.applies(RuleWorkflowFiles) && writes && c.Path != "" && underWorkflows(c.Path) {
		return deny(RuleWorkflowFiles, c.Path+" is under "+workflowDir+", where this task never writes (a workflow runs with the repository's secrets): "+
			"files elsewhere are allowed")
	}
	if !writes {
		if c.Repository == "" {
			return Decision{Effect: Allow, Rule: RuleRead, Reason: c.Tool + " only reads, which this policy allows"}
		}
		return Decision{Effect: Allow, Rule: RuleRead, Reason: "reads of this task's repositories are allowed: " + repositories(t)}
	}
	return Decision{Effect: Allow, Rule: RuleAllow, Reason: "no rule refuses it: this task writes to " + repositories(t) +
		" except " + protected(t) + ", on branches it creates starting with " + t.prefix() + ", and not under " + workflowDir}
}

func deny(rule, reason string) Decision {
	return Decision{Effect: Deny, Rule: rule, Reason: reason}
}

// repositories lists the task's repositories for a reason.
func repositories(t Task) string {
	if len(t.Repositories) == 0 {
		return "none (it was sent to no repository)"
	}
	return strings.Join(t.Repositories, ", ")
}

// protected names the branches the task never writes to.
func protected(t Task) string {
	switch {
	case t.Base == "" && t.DefaultBranch == "":
		return "no branch"
	case t.DefaultBranch == "" || t.DefaultBranch == t.Base:
		return "its base branch " + t.Base
	case t.Base == "":
		return "the default branch " + t.DefaultBranch
	}
	return "its base branch " + t.Base + " and the default branch " + t.DefaultBranch
}

func orThe(repo string) string {
	if repo == "" {
		return "the repository"
	}
	return repo
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// underWorkflows is whether p, cleaned ("a/../.github/workflows/x",
// "/.github/workflows/x"), is under .github/workflows/, without regard to
// case.
func underWorkflows(p string) bool {
	p = strings.TrimLeft(path.Clean("/"+p), "/")
	return len(p) >= len(workflowDir) && strings.EqualFold(p[:len(workflowDir)], workflowDir) ||
		strings.EqualFold(p, strings.TrimSuffix(workflowDir, "/"))
}
