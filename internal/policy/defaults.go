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
	// RuleWorkflowFiles refuses a write of a file GitHub runs, or reads
	// settings from, with the repository's secrets: anything under
	// .github/ (workflows, composite actions, dependabot.yml, CODEOWNERS)
	// and a root action.yml or action.yaml, the action the repository
	// publishes.
	RuleWorkflowFiles = "default/workflow-files"
	// RuleOwnBranch refuses a write onto a branch the task did not create
	// with its prefix (Task.CreatedBranches) and that no --allow-branch
	// names (Task.AllowBranches): a release branch, gh-pages, a
	// colleague's pull request branch. A pull request is no write onto its
	// head (Call.WritesOnto).
	RuleOwnBranch = "default/own-branch"
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
var BuiltinRules = []string{RuleRepository, RuleBaseBranch, RuleBranchPrefix, RuleWorkflowFiles, RuleOwnBranch, RuleRead, RuleAllow}

// githubDir is where GitHub reads workflows, actions and settings from: a
// file there can run code with the repository's secrets.
const githubDir = ".github/"

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
	if t.applies(RuleWorkflowFiles) && writes && c.Path != "" {
		switch p := cleanPath(c.Path); {
		case underGitHub(p):
			return deny(RuleWorkflowFiles, c.Path+" is under "+githubDir+", where this task never writes (workflows and actions there run with the repository's secrets): "+
				"files elsewhere are allowed")
		case isRootAction(p):
			return deny(RuleWorkflowFiles, c.Path+" is the action this repository publishes, which this task never writes (it runs with its users' secrets): "+
				"files elsewhere are allowed")
		}
	}
	// The base and the default branch are default/base-branch's to refuse
	// (and a worker's override of it to allow): no task creates them.
	ontoBase := c.Branch != "" && (c.Branch == t.Base || c.Branch == t.DefaultBranch)
	if t.applies(RuleOwnBranch) && !ontoBase && c.WritesOnto() && !t.allowsBranch(c.Branch) && (!t.created(c.Repository, c.Branch) || !strings.HasPrefix(c.Branch, t.prefix())) {
		return deny(RuleOwnBranch, c.Branch+" is not a branch this task created (github_create_branch, starting with "+t.prefix()+
			"), and it writes only onto those"+allowedBranches(t)+": create one and write there")
	}
	if !writes {
		if c.Repository == "" {
			return Decision{Effect: Allow, Rule: RuleRead, Reason: c.Tool + " only reads, which this policy allows"}
		}
		return Decision{Effect: Allow, Rule: RuleRead, Reason: "reads of this task's repositories are allowed: " + repositories(t)}
	}
	return Decision{Effect: Allow, Rule: RuleAllow, Reason: "no rule refuses it: this task writes to " + repositories(t) +
		" except " + protected(t) + ", onto branches it created starting with " + t.prefix() + allowedBranches(t) +
		", and not under " + githubDir + " nor to a root action.yml"}
}

// allowedBranches names the branches --allow-branch adds, for a reason; ""
// when none.
func allowedBranches(t Task) string {
	if len(t.AllowBranches) == 0 {
		return ""
	}
	return " or that --allow-branch names (" + strings.Join(t.AllowBranches, ", ") + ")"
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

// cleanPath is p relative to the repository's root, cleaned:
// "a/../.github/x" and "/.github/x" are ".github/x", "./action.yml" is
// "action.yml".
func cleanPath(p string) string {
	return strings.TrimLeft(path.Clean("/"+p), "/")
}

// underGitHub is whether the cleaned path p is .github or under it,
// without regard to case.
func underGitHub(p string) bool {
	return len(p) >= len(githubDir) && strings.EqualFold(p[:len(githubDir)], githubDir) ||
		strings.EqualFold(p, strings.TrimSuffix(githubDir, "/"))
}

// isRootAction is whether the cleaned path p is the root action.yml or
// action.yaml, without regard to case.
func isRootAction(p string) bool {
	return strings.EqualFold(p, "action.yml") || strings.EqualFold(p, "action.yaml")
}
