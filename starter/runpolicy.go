package main

import (
	"errors"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/tools/ghref"
)

// taskPolicy is the policy context `starter run` fixes in the task's input
// (docs/design.md §5.8): the task's repositories (--repo, the repository of
// each --comment, each --allow-repo, each once), its base branch, branch
// prefix (CAPSTAN_BRANCH_PREFIX), the branches it may write onto besides
// those it creates (--allow-branch), tenant and labels, the refusal limit
// (--max-refusals, else CAPSTAN_POLICY_REFUSALS), and the text of the
// policy file CAPSTAN_POLICY names. A bad file is its one sentence, as a
// usage error: nothing is started.
func (a *app) taskPolicy(f runFlags, comments []contract.CommentTarget) (*contract.TaskPolicy, error) {
	tp := &contract.TaskPolicy{Base: f.base, BranchPrefix: a.cfg.BranchPrefix, Tenant: f.tenant, MaxRefusals: a.cfg.PolicyRefusals}
	repos, err := taskstart.Repositories(f.repo, comments, f.allowRepos)
	var bad *taskstart.BadRepositoryError
	if errors.As(err, &bad) {
		return nil, usagef("--allow-repo %q is not of the form OWNER/NAME", bad.Repo)
	}
	tp.Repositories = repos
	for _, b := range f.allowBranches {
		if !ghref.ValidBranch(b) || strings.HasPrefix(b, "refs/") {
			return nil, usagef("--allow-branch %q is not a branch name (without refs/heads/)", b)
		}
		if !slices.Contains(tp.AllowBranches, b) {
			tp.AllowBranches = append(tp.AllowBranches, b)
		}
	}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef("--label %q is not KEY=VALUE", kv)
		}
		if tp.Labels == nil {
			tp.Labels = map[string]string{}
		}
		tp.Labels[k] = v
	}
	for _, n := range f.requireApproval {
		if err := approvable(n); err != nil {
			return nil, err
		}
		if !slices.Contains(tp.RequireApproval, n) {
			tp.RequireApproval = append(tp.RequireApproval, n)
		}
	}
	if f.maxRefusals != 0 {
		if f.maxRefusals < 1 {
			return nil, usagef("--max-refusals %d is out of range (at least 1)", f.maxRefusals)
		}
		tp.MaxRefusals = f.maxRefusals
	}
	if a.cfg.PolicyFile != "" {
		p, err := policy.Load(a.cfg.PolicyFile)
		if err == nil {
			err = p.CheckBuiltinTools() // an MCP tool's name is the worker's to check
		}
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		tp.File, tp.Source = a.cfg.PolicyFile, string(p.Source())
	}
	return tp, nil
}

// mcpToolName is the form of an MCP tool's name (docs/design.md §5.10):
// which tools a worker's MCP servers offer is the worker's to know, not
// the starter's, so the starter checks the form alone.
var mcpToolName = regexp.MustCompile(`^mcp__[A-Za-z0-9_-]+__[A-Za-z0-9_-]+$`)

// workerToolName is the form of the name of a worker's own Go tool
// (tool.New): which ones a worker has is the worker's to know.
var workerToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// approvable refuses a --require-approval that names neither a built-in
// tool, an MCP tool (mcp__<server>__<tool>), a name a worker's own tool
// may have (outside policy.BuiltinPrefix) nor a safety class, with one
// sentence saying which names are. The worker checks the names it is left
// against its tools (policy.CheckApprovalNames).
func approvable(name string) error {
	if _, ok := policy.BuiltinTools[name]; ok || mcpToolName.MatchString(name) {
		return nil
	}
	if workerToolName.MatchString(name) && !strings.HasPrefix(name, policy.BuiltinPrefix) && !strings.HasPrefix(name, "mcp__") {
		return nil
	}
	classes := []string{string(capstan.ClassReadOnly), string(capstan.ClassIdempotent), string(capstan.ClassConditional), string(capstan.ClassUnsafe)}
	if slices.Contains(classes, name) {
		return nil
	}
	tools := make([]string, 0, len(policy.BuiltinTools))
	for n := range policy.BuiltinTools {
		tools = append(tools, n)
	}
	sort.Strings(tools)
	return usagef("--require-approval %q is neither a tool (%s, an MCP tool's mcp__<server>__<tool>, or a worker's own tool, named by letters, digits, _ and - outside %s) nor a class (%s)",
		name, strings.Join(tools, ", "), policy.BuiltinPrefix, strings.Join(classes, ", "))
}
