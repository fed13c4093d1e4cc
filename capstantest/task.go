package capstantest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TaskOptions describe a task as `starter run`'s flags do. Only Prompt,
// Model and TaskQueue are needed; zero fields take the starter's defaults.
type TaskOptions struct {
	// ID is the task's id (the workflow id is "task-" and it); empty
	// generates one from the test's name.
	ID string
	// Prompt is what the agent should do.
	Prompt string
	// Model is PROVIDER:MODEL; with a [Sandbox], "openai:NAME" or
	// "anthropic:NAME" plays the script NAME ([Sandbox.Script]).
	Model string
	// Fallbacks are further models a turn may switch to (--fallback).
	Fallbacks []string
	// TaskQueue is the queue the worker polls.
	TaskQueue string
	// Repository is the repository the agent works on, OWNER/NAME (--repo).
	Repository string
	// Repositories are further repositories the task's policy lets it
	// touch (--allow-repo).
	Repositories []string
	// Base is the base branch (default "main").
	Base string
	// SlackChannel receives the final answer (--slack).
	SlackChannel string
	// Comments are issues or pull requests, OWNER/NAME#N, that receive the
	// final answer as a comment (--comment).
	Comments []string
	// Tenant is the task's tenant (default "default").
	Tenant string
	// Labels are the task's labels, which policy rules read (--label).
	Labels map[string]string
	// AllowBranches are existing branches the task may write onto
	// (--allow-branch).
	AllowBranches []string
	// PolicyFile names a policy file the task's calls are decided
	// against, as CAPSTAN_POLICY does for the starter; Rules is a policy
	// file's text given directly. At most one of them.
	PolicyFile string
	// Rules is a policy file's text (see PolicyFile).
	Rules string
	// RequireApproval are tool names or classes whose calls wait for a
	// person's approval (--require-approval): see [Task.Approve].
	RequireApproval []string
	// MaxRefusals is how many calls the policy refuses before the task
	// fails (default the worker's, 3).
	MaxRefusals int
	// MaxTurns bounds the model turns (default 20).
	MaxTurns int
	// MaxTokens is the task's token budget (default the worker's
	// CAPSTAN_MAX_TOKENS_PER_TASK, or 2000000).
	MaxTokens int64
	// MaxCostUSD is the task's cost budget in US dollars, priced by the
	// worker's CAPSTAN_MODEL_PRICES (default none).
	MaxCostUSD float64
	// HumanTimeout bounds the wait for a person to resolve an operation
	// (default 24h); ApprovalTimeout the wait for an approval (default
	// 168h).
	HumanTimeout, ApprovalTimeout time.Duration
	// ReconcileWindow is how long a reconciler keeps looking for an effect
	// it does not see yet before calling it absent (default 60s, as
	// CAPSTAN_RECONCILE_WINDOW): a test of a service that never lags may
	// shorten it.
	ReconcileWindow time.Duration
}

// Task is a task a test started.
type Task struct {
	t     testing.TB
	c     client.Client
	id    string
	wid   string
	runID string
}

// StartTask starts the AgentTask workflow of o on o.TaskQueue, as
// `starter run` starts it (the same workflow id, id policies, search
// attributes, fairness key and input), and fails the test when the
// options are invalid or the start is refused. It does not wait for it.
func StartTask(t testing.TB, c client.Client, o TaskOptions) *Task {
	t.Helper()
	in, err := taskInput(t, o)
	if err != nil {
		t.Fatalf("capstantest: StartTask: %v", err)
	}
	if o.TaskQueue == "" {
		t.Fatalf("capstantest: StartTask: TaskOptions.TaskQueue is empty: give the queue the worker polls")
	}
	wid := workflows.WorkflowID(in.TaskID)
	opts := taskstart.Options(in, o.TaskQueue, temporal.Priority{FairnessKey: in.Tenant}, taskstart.NewStartID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var run client.WorkflowRun
	for pause := 100 * time.Millisecond; ; pause *= 2 {
		run, err = c.ExecuteWorkflow(ctx, opts, workflows.AgentTask, in)
		// A search attribute registered a moment ago is served once the
		// server's namespace cache refreshes.
		if !undefinedAttribute(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(min(pause, 2*time.Second))
	}
	if err != nil {
		t.Fatalf("capstantest: start task %s: %v", in.TaskID, err)
	}
	return &Task{t: t, c: c, id: in.TaskID, wid: wid, runID: run.GetRunID()}
}

var undefinedAttributeText = regexp.MustCompile(`no mapping defined for search attribute|search attribute \w+ is not defined`)

func undefinedAttribute(err error) bool {
	var invalid *serviceerror.InvalidArgument
	return errors.As(err, &invalid) && undefinedAttributeText.MatchString(invalid.Message)
}

// taskInput checks o as `starter run` checks its flags and builds the
// workflow's input.
func taskInput(t testing.TB, o TaskOptions) (workflows.AgentTaskInput, error) {
	var in workflows.AgentTaskInput
	if strings.TrimSpace(o.Prompt) == "" {
		return in, errors.New("TaskOptions.Prompt is empty")
	}
	if o.Repository != "" {
		if _, err := ghref.ParseRepo(o.Repository); err != nil {
			return in, fmt.Errorf("TaskOptions: Repository %q is not of the form OWNER/NAME", o.Repository)
		}
	}
	base := cmpOr(o.Base, config.DefaultBaseBranch)
	if !ghref.ValidBranch(base) {
		return in, fmt.Errorf("TaskOptions: Base %q is not a valid branch name", base)
	}
	m := cmpOr(o.Model, config.DefaultModel)
	for _, ref := range append([]string{m}, o.Fallbacks...) {
		if _, err := model.ParseRef(ref); err != nil {
			return in, fmt.Errorf("model %q: %v", ref, err)
		}
	}
	var comments []contract.CommentTarget
	for _, s := range o.Comments {
		issue, err := ghref.ParseIssue(s)
		if err != nil {
			return in, fmt.Errorf("TaskOptions: Comments: %q is not of the form OWNER/NAME#N", s)
		}
		comments = append(comments, contract.CommentTarget{Repo: issue.Repo.String(), Number: issue.Number})
	}
	id := o.ID
	if id == "" {
		id = newTaskID(t.Name())
	}
	tenant := cmpOr(o.Tenant, config.DefaultTenant)
	tp := &contract.TaskPolicy{Base: base, Tenant: tenant, MaxRefusals: o.MaxRefusals, Labels: o.Labels}
	repos, err := taskstart.Repositories(o.Repository, comments, o.Repositories)
	if err != nil {
		return in, fmt.Errorf("TaskOptions: Repositories: %w", err)
	}
	tp.Repositories = repos
	for _, b := range o.AllowBranches {
		if !slices.Contains(tp.AllowBranches, b) {
			tp.AllowBranches = append(tp.AllowBranches, b)
		}
	}
	for _, n := range o.RequireApproval {
		if !slices.Contains(tp.RequireApproval, n) {
			tp.RequireApproval = append(tp.RequireApproval, n)
		}
	}
	switch {
	case o.PolicyFile != "" && o.Rules != "":
		return in, errors.New("TaskOptions: give PolicyFile or Rules, not both")
	case o.PolicyFile != "":
		data, err := os.ReadFile(o.PolicyFile)
		if err != nil {
			return in, err
		}
		tp.File, tp.Source = o.PolicyFile, string(data)
	case o.Rules != "":
		tp.File, tp.Source = "capstantest.TaskOptions.Rules", o.Rules
	}
	if tp.Source != "" {
		if _, err := policy.Parse(tp.File, []byte(tp.Source)); err != nil {
			return in, err
		}
	}
	if o.MaxTokens < 0 || o.MaxCostUSD < 0 {
		return in, errors.New("TaskOptions: MaxTokens and MaxCostUSD must not be negative")
	}
	return workflows.AgentTaskInput{
		TaskID: id, Tenant: tenant, Logic: workflows.CurrentLogic, Prompt: o.Prompt, Repo: o.Repository, Base: base,
		SlackChannel: o.SlackChannel, Comments: comments, Model: m, Fallbacks: o.Fallbacks,
		MaxTurns: cmpOr(o.MaxTurns, config.DefaultMaxTurns), HumanTimeout: cmpOr(o.HumanTimeout, config.DefaultHumanTimeout),
		ApprovalTimeout: cmpOr(o.ApprovalTimeout, config.DefaultApprovalTimeout), Policy: tp,
		ReconcileWindow: cmpOr(o.ReconcileWindow, config.DefaultReconcileWindow),
		Budget:          contract.Budget{MaxTokens: o.MaxTokens, MaxCostUSD: o.MaxCostUSD},
	}, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// newTaskID is a fresh task id from the test's name: its letters and
// digits, then a random suffix, so reruns never collide.
func newTaskID(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 60 {
			break
		}
	}
	rnd := make([]byte, 4)
	_, _ = rand.Read(rnd)
	return strings.Trim(b.String(), "-") + "-" + hex.EncodeToString(rnd)
}

// ID is the task's id.
func (k *Task) ID() string { return k.id }

// WorkflowID is the id of the task's workflow: "task-" and its id.
func (k *Task) WorkflowID() string { return k.wid }

// RunID is the run id of the task's workflow as it started.
func (k *Task) RunID() string { return k.runID }
