package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/policy"
)

// policyCommand groups the policy file's commands (docs/design.md §5.8):
// check validates a file, explain shows which rule decides a call. Neither
// talks to Temporal.
func (a *app) policyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy (check FILE | explain --tool NAME ...)",
		Short: "Validate a policy file, or show which rule decides a tool call",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return usagef("policy needs a subcommand: check FILE or explain --tool NAME")
		},
	}
	cmd.AddCommand(a.policyCheckCommand(), a.policyExplainCommand())
	return cmd
}

// policyCheckCommand loads FILE as `starter run` would and prints its
// rules, one a line; a bad file, or one with a rule naming no built-in tool
// and no MCP name (CheckBuiltinTools), is its one sentence on stderr and
// exit status 2.
func (a *app) policyCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file and print the rules it holds, in the order they are tried",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			p, err := policy.Load(args[0])
			if err == nil {
				err = p.CheckBuiltinTools() // an MCP tool's name is the worker's to check
			}
			if err != nil {
				return &usageError{msg: err.Error()}
			}
			for _, r := range p.Rules() {
				fmt.Fprintln(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "%s: %d rules, decided beside the defaults: %s\n", args[0], len(p.Rules()), strings.Join(policy.BuiltinRules, ", "))
			return nil
		},
	}
}

// explainFlags are a tool call and its task, as flags.
type explainFlags struct {
	file, tool, class, server           string
	repo, branch, path, from, into      string
	taskRepos, labels, attributes       []string
	allowBranches, createdBranches      []string
	base, defaultBranch, prefix, tenant string
}

// policyExplainCommand prints the decision the policy makes for one call:
// the file decided as a worker's floor is (policy.Stack), so an override
// rule lifts its default here as it does on a worker whose CAPSTAN_POLICY
// the file is, and the layer that decided.
func (a *app) policyExplainCommand() *cobra.Command {
	var f explainFlags
	cmd := &cobra.Command{
		Use:   "explain --tool NAME [--repo R --branch B --path P --from F --into I] [--task-repo R]... [--base B] [--tenant T] [--label K=V]... [--attribute K=V]... [--allow-branch B]... [--created-branch B]...",
		Short: "Show which rule decides a tool call, and why",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			p, c, t, err := f.resolve()
			if err != nil {
				return err
			}
			d := policy.Stack{Floor: p}.Decide(c, t)
			fmt.Fprintf(a.stdout, "decision: %s\nrule:     %s\nlayer:    %s\nreason:   %s\n", d.Effect, d.Rule, d.Layer, d.Reason)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.file, "file", a.cfg.PolicyFile, "the policy file, decided as a worker's own (default $CAPSTAN_POLICY; none: the default rules alone)")
	fl.StringVar(&f.tool, "tool", "", "the tool's name, e.g. github_put_file (required)")
	fl.StringVar(&f.class, "class", "", "the tool's class: read_only, idempotent, conditional or unsafe (required for a tool that is not built in)")
	fl.StringVar(&f.server, "server", "", "the MCP server the tool comes from")
	fl.StringVar(&f.repo, "repo", "", "OWNER/NAME the call reads or writes")
	fl.StringVar(&f.branch, "branch", "", "the branch it writes to, creates, proposes (a pull request's head) or reads at")
	fl.StringVar(&f.path, "path", "", "the file it reads or writes")
	fl.StringVar(&f.from, "from", "", "the branch a created branch starts from")
	fl.StringVar(&f.into, "into", "", "the branch a pull request merges into")
	fl.StringArrayVar(&f.taskRepos, "task-repo", nil, "one of the task's repositories (repeatable: its --repo, its --comment's, its --allow-repo)")
	fl.StringVar(&f.base, "base", config.DefaultBaseBranch, "the task's base branch")
	fl.StringVar(&f.defaultBranch, "default-branch", "", "the repository's default branch, when known")
	fl.StringVar(&f.prefix, "branch-prefix", a.cfg.BranchPrefix, "what branches the task creates start with (default $CAPSTAN_BRANCH_PREFIX)")
	fl.StringVar(&f.tenant, "tenant", config.DefaultTenant, "the task's tenant")
	fl.StringArrayVar(&f.labels, "label", nil, "one of the task's labels, KEY=VALUE (repeatable)")
	fl.StringArrayVar(&f.attributes, "attribute", nil, "one of the call's attributes its tool gives (tool.Target.Attributes), KEY=VALUE (repeatable): a rule reads it as attributes[\"KEY\"]")
	fl.StringArrayVar(&f.allowBranches, "allow-branch", nil, "a branch the task was started with --allow-branch (repeatable)")
	fl.StringArrayVar(&f.createdBranches, "created-branch", nil, "a branch the task has created in --repo, as its ledger records it (repeatable): a write onto another is refused")
	return cmd
}

// resolve is the policy, the call and the task the flags describe.
func (f explainFlags) resolve() (*policy.Policy, policy.Call, policy.Task, error) {
	var none policy.Call
	if f.tool == "" {
		return nil, none, policy.Task{}, usagef("explain needs --tool NAME")
	}
	c := policy.Call{Tool: f.tool, Server: f.server, Repository: f.repo, Branch: f.branch, Path: f.path, From: f.from, Into: f.into}
	builtin, isBuiltin := policy.BuiltinTools[f.tool]
	switch {
	case f.class != "":
		c.Class = capstan.Class(f.class)
		switch c.Class {
		case capstan.ClassReadOnly, capstan.ClassIdempotent, capstan.ClassConditional, capstan.ClassUnsafe:
		default:
			return nil, none, policy.Task{}, usagef("--class %q is none of read_only, idempotent, conditional, unsafe", f.class)
		}
	case isBuiltin:
		c.Class = builtin.Class
	default:
		return nil, none, policy.Task{}, usagef("%s is not a built-in tool: give its --class", f.tool)
	}
	c.CreatesBranch = isBuiltin && builtin.CreatesBranch
	c.Writes = c.Class != capstan.ClassReadOnly
	t := policy.Task{Repositories: f.taskRepos, Base: f.base, DefaultBranch: f.defaultBranch, BranchPrefix: f.prefix, Tenant: f.tenant,
		AllowBranches: f.allowBranches}
	for _, b := range f.createdBranches {
		t.CreatedBranches = append(t.CreatedBranches, policy.Branch{Repository: f.repo, Name: b})
	}
	var err error
	if t.Labels, err = keyValues("--label", f.labels); err != nil {
		return nil, none, policy.Task{}, err
	}
	if c.Attributes, err = keyValues("--attribute", f.attributes); err != nil {
		return nil, none, policy.Task{}, err
	}
	p := policy.Builtin()
	if f.file != "" {
		if p, err = policy.Load(f.file); err != nil {
			return nil, none, policy.Task{}, &usageError{msg: err.Error()}
		}
	}
	return p, c, t, nil
}

// keyValues is the KEY=VALUE flags of flag as a map; nil for none.
func keyValues(flag string, kvs []string) (map[string]string, error) {
	var m map[string]string
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q is not KEY=VALUE", flag, kv)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m, nil
}
