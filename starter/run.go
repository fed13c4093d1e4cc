package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/tools/ghref"
	captrace "github.com/capstanhq/capstan/internal/trace"
	"github.com/capstanhq/capstan/internal/workflows"
)

// runFlags are the flags of `starter run`.
type runFlags struct {
	prompt, repo, base, slack, model, id, tenant string
	comments, fallbacks, allowRepos, labels      []string
	requireApproval, allowBranches               []string
	maxTurns, maxRefusals, priority              int
	humanTimeout, idleTimeout, maxDuration       time.Duration
	approvalTimeout                              time.Duration
	wait, json, persistent, follow               bool
	budget                                       budgetFlags
}

func (a *app) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --prompt TEXT [flags]",
		Short: "Start an agent task",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := a.taskInput(f)
			if err != nil {
				return err
			}
			if f.follow && f.json {
				return usagef("--follow shows the task live to a person; for JSON use --wait --json")
			}
			return a.start(cmd.Context(), a.cfg.TaskQueue, in, f.wait || f.follow, f.json, f.follow)
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	f.registerID(fl)
	fl.BoolVar(&f.wait, "wait", false, "wait for the task to end and print its result")
	fl.BoolVar(&f.follow, "follow", false, "watch the task live (as starter follow does) until it ends, then print its result")
	fl.BoolVar(&f.json, "json", false, "print machine-readable JSON")
	return cmd
}

// register declares the flags that describe the task, every flag of
// `starter run` but --id, --wait, --follow and --json, on fl: the run
// command's flags, the flags run_task's input becomes (mcpserve.go) and
// those of `starter schedule create`, so that all take the same defaults
// and refuse the same values in the same words.
func (f *runFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.prompt, "prompt", "", "what the agent should do (required)")
	fl.StringVar(&f.repo, "repo", "", "GitHub repository the agent works on, OWNER/NAME")
	fl.StringVar(&f.base, "base", config.DefaultBaseBranch, "base branch for the agent's changes")
	fl.StringVar(&f.slack, "slack", "", "Slack channel that receives the final answer")
	fl.StringArrayVar(&f.comments, "comment", nil, "also post the final answer as a comment on OWNER/NAME#N, an issue or pull request (repeatable)")
	fl.StringVar(&f.model, "model", "", "model as PROVIDER:MODEL (default $CAPSTAN_MODEL or "+config.DefaultModel+")")
	fl.StringVar(&f.tenant, "tenant", config.DefaultTenant, "tenant the task's operations belong to; also its search attribute CapstanTenant and the fairness key of all its workflow and activity tasks (weights: CAPSTAN_TENANT_WEIGHTS)")
	fl.IntVar(&f.priority, "priority", 0, "the task's priority, 1 (highest) to 5, for all its workflow and activity tasks (default Temporal's, 3)")
	fl.StringArrayVar(&f.allowRepos, "allow-repo", nil, "a further repository, OWNER/NAME, the task's policy lets it read and write besides --repo and the --comment ones (repeatable)")
	fl.StringArrayVar(&f.allowBranches, "allow-branch", nil, "an existing branch the task's policy lets it write onto, in its repositories, besides the branches it creates (repeatable; never the base or the default branch)")
	fl.StringArrayVar(&f.labels, "label", nil, "a label of the task, KEY=VALUE, which policy rules can read (repeatable)")
	fl.IntVar(&f.maxRefusals, "max-refusals", 0, "how many tool calls the policy refuses before the task fails with policy_violation (default $CAPSTAN_POLICY_REFUSALS or 3)")
	fl.StringArrayVar(&f.requireApproval, "require-approval", nil, "a tool name, or a class (read_only, idempotent, conditional, unsafe), whose calls wait for a person's approval (starter approve, starter deny) before anything is sent (repeatable)")
	fl.DurationVar(&f.approvalTimeout, "approval-timeout", 0, "how long an operation waits for approval before it is denied (default $CAPSTAN_APPROVAL_TIMEOUT or 168h)")
	fl.StringArrayVar(&f.fallbacks, "fallback", nil, "a further model, PROVIDER:MODEL, that a turn switches to once when the model stays overloaded or runs past its total limit; the task keeps it (repeatable, tried in order)")
	fl.BoolVar(&f.persistent, "persistent", false, "retry an overloaded model for up to 6h (each wait at most 5m, journalled every 30s) instead of 5 attempts")
	fl.IntVar(&f.maxTurns, "max-turns", config.DefaultMaxTurns, "most model turns before the task fails with max_turns")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", 0, "cut a model stream silent this long and retry it once (default $CAPSTAN_MODEL_IDLE_TIMEOUT or 120s)")
	fl.DurationVar(&f.maxDuration, "max-duration", 0, "total limit of one model attempt (default $CAPSTAN_MODEL_MAX_DURATION or 10m)")
	fl.Int64Var(&f.budget.maxTokens, "max-tokens", 0, "the task's token budget: input plus output tokens of all its model requests, abandoned ones included; past it the task fails with budget_exhausted (default $CAPSTAN_MAX_TOKENS_PER_TASK of the worker, or 2000000)")
	fl.Float64Var(&f.budget.maxCost, "max-cost", 0, "the task's cost budget in US dollars, priced by CAPSTAN_MODEL_PRICES; every model of the task needs a price (default $CAPSTAN_MAX_COST_PER_TASK of the worker, or none)")
	fl.DurationVar(&f.humanTimeout, "human-timeout", config.DefaultHumanTimeout, "how long the task waits for a person to resolve an operation before it fails with needs_human_timeout")
}

// registerID declares --id, the task's own id, for `starter run` and
// run_task (a schedule's runs take theirs from the schedule).
func (f *runFlags) registerID(fl *pflag.FlagSet) {
	fl.StringVar(&f.id, "id", "", "task id (default: generated); the workflow id is task-<id>")
}

// demoCommand runs the sample task on the sandbox's own queue, where `make
// demo` runs an ordinary worker pointed at the sandbox program. The model
// name selects the sandbox model's script: openai:demo plays "demo" through
// the worker's OpenAI provider, as any OpenAI-compatible server would.
func (a *app) demoCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the sample task on a worker pointed at the sandbox (make demo; the sandbox's own task queue) and wait for it",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := a.taskInput(runFlags{
				prompt: "Add a HELLO.md greeting to the repository on a new branch, open a pull request, and tell the team.",
				repo:   "capstan-sandbox/demo", base: config.DefaultBaseBranch, slack: "#capstan-demo", model: "openai:demo",
				tenant: config.DefaultTenant, maxTurns: 10, humanTimeout: config.DefaultHumanTimeout,
			})
			if err != nil {
				return err
			}
			return a.start(cmd.Context(), a.cfg.SandboxTaskQueue(), in, true, asJSON, false)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

var (
	idPattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	channelPattern = regexp.MustCompile(`^#?[A-Za-z0-9._-]{1,80}$`)
)

// taskInput validates the flags; every error is a usage error and nothing
// has been started.
func (a *app) taskInput(f runFlags) (workflows.AgentTaskInput, error) {
	var in workflows.AgentTaskInput
	if err := a.cfg.ValidateStarter(); err != nil {
		return in, usagef("%v", err)
	}
	if strings.TrimSpace(f.prompt) == "" {
		return in, usagef("--prompt is required and must not be empty")
	}
	if f.priority < 0 || f.priority > maxPriority {
		return in, usagef("--priority %d is out of range (1, the highest, to %d)", f.priority, maxPriority)
	}
	// The same rules as the tools, so a task never starts only to have its
	// every call refused.
	if _, err := ghref.ParseRepo(f.repo); err != nil && f.repo != "" {
		return in, usagef("--repo %q is not of the form OWNER/NAME (letters, digits, '-', and '.' or '_' in the name)", f.repo)
	}
	if !ghref.ValidBranch(f.base) {
		return in, usagef("--base %q is not a valid branch name", f.base)
	}
	if f.slack != "" && !channelPattern.MatchString(f.slack) {
		return in, usagef("--slack %q is not a Slack channel name or id", f.slack)
	}
	comments, err := commentTargets(f.comments)
	if err != nil {
		return in, err
	}
	m, source := f.model, "--model"
	if m == "" {
		m, source = a.cfg.Model, "CAPSTAN_MODEL"
	}
	if _, err := model.ParseRef(m); err != nil {
		return in, usagef("%s: %v", source, err)
	}
	seen := map[string]bool{m: true}
	for _, fb := range f.fallbacks {
		if _, err := model.ParseRef(fb); err != nil {
			return in, usagef("--fallback: %v", err)
		}
		if seen[fb] {
			return in, usagef("--fallback %s is already the task's model or an earlier fallback", fb)
		}
		seen[fb] = true
	}
	id := f.id
	if id == "" {
		id = newTaskID()
	} else if !idPattern.MatchString(id) {
		return in, usagef("--id %q may only hold letters, digits, '.', '_' and '-' (at most 100)", id)
	} else if workflows.IsScheduledTaskID(id) {
		return in, usagef("--id %q ends as a scheduled run's task id does (-YYYYMMDDTHHMMSSZ), which only a schedule gives", id)
	}
	if !idPattern.MatchString(f.tenant) {
		return in, usagef("--tenant %q may only hold letters, digits, '.', '_' and '-'", f.tenant)
	}
	if f.maxTurns < 1 || f.maxTurns > 1000 {
		return in, usagef("--max-turns %d is out of range (1 to 1000)", f.maxTurns)
	}
	if f.humanTimeout < time.Minute {
		return in, usagef("--human-timeout %s is too short (at least 1m)", f.humanTimeout)
	}
	approvalTimeout := f.approvalTimeout
	if approvalTimeout == 0 {
		approvalTimeout = a.cfg.ApprovalTimeout
	}
	if approvalTimeout < time.Second {
		return in, usagef("--approval-timeout %s is too short (at least 1s)", approvalTimeout)
	}
	if f.idleTimeout < 0 || f.maxDuration < 0 {
		return in, usagef("--idle-timeout and --max-duration must be positive durations")
	}
	// Only what this task sets travels in its input; the worker that runs
	// the task's first step fills the rest from its CAPSTAN_MODEL_* and
	// CAPSTAN_HEARTBEAT_TIMEOUT (and checks the whole again).
	limits := model.Limits{Idle: f.idleTimeout, Total: f.maxDuration}
	if err := limits.Validate(); err != nil {
		return in, usagef("%v", err)
	}
	tp, err := a.taskPolicy(f, comments)
	if err != nil {
		return in, err
	}
	budget, err := a.taskBudget(f.budget, append([]string{m}, f.fallbacks...))
	if err != nil {
		return in, err
	}
	return workflows.AgentTaskInput{
		Budget: budget,
		TaskID: id, Tenant: f.tenant, Priority: f.priority, Logic: workflows.CurrentLogic, Prompt: f.prompt, Repo: f.repo, Base: f.base,
		SlackChannel: f.slack, Comments: comments, Model: m, Fallbacks: f.fallbacks, Persistent: f.persistent,
		MaxTurns: f.maxTurns, ModelLimits: limits,
		HumanTimeout: f.humanTimeout, ReconcileWindow: a.cfg.ReconcileWindow, DependencyOutageLimit: a.cfg.DependencyOutageLimit, Policy: tp, ApprovalTimeout: approvalTimeout,
		Approvers: a.cfg.Approvers,
	}, nil
}

// maxPriority is the lowest priority (Temporal's default number of
// priority levels, matching.priorityLevels).
const maxPriority = 5

// taskPriority is the priority a task of tenant is started with: the
// tenant as its fairness key, the tenant's CAPSTAN_TENANT_WEIGHTS weight,
// and --priority (0: the server's default).
func (a *app) taskPriority(tenant string, priority int) temporal.Priority {
	return temporal.Priority{PriorityKey: priority, FairnessKey: tenant, FairnessWeight: a.cfg.TenantWeights.Weight(tenant)}
}

func newTaskID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

func (a *app) dial(ctx context.Context) (client.Client, client.Options, error) {
	quiet := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if err := a.cfg.CheckCodecKeys(); err != nil {
		return nil, client.Options{}, err
	}
	keys, err := codec.New(a.cfg.CodecKeys)
	if err != nil {
		return nil, client.Options{}, err
	}
	interceptors, err := a.traceInterceptors(ctx)
	if err != nil {
		return nil, client.Options{}, err
	}
	return config.DialTemporal(ctx, "capstan-starter@"+config.Hostname(), tlog.NewStructuredLogger(quiet), nil, codec.PayloadCodec(keys), 10*time.Second,
		interceptors...)
}

// traceInterceptors are the client interceptors that start a task's trace
// where the starter starts it (OTEL_EXPORTER_OTLP_ENDPOINT); none when
// traces are off.
func (a *app) traceInterceptors(ctx context.Context) ([]interceptor.ClientInterceptor, error) {
	if a.tracing == nil {
		getenv := a.getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		p, err := captrace.Setup(ctx, func(k string) (string, bool) { v := getenv(k); return v, v != "" }, "capstan-starter")
		if err != nil {
			return nil, err
		}
		a.tracing = p
	}
	return a.tracing.ClientInterceptors()
}

// flushTraces sends the starter's buffered spans before it exits.
func (a *app) flushTraces() {
	if a.tracing == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.tracing.Shutdown(ctx)
}

// startedTask is a task just started: `starter run --json`'s answer, and
// run_task's.
type startedTask struct {
	TaskID     string `json:"task_id"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	UIURL      string `json:"ui_url"`
	// Attached: the task was running already, started with this input,
	// and this call attached to it rather than starting one.
	Attached bool `json:"attached"`
}

func (s startedTask) verb() string {
	if s.Attached {
		return "attached to running task"
	}
	return "started task"
}

// text is what `starter run` prints for it without --json.
func (s startedTask) text() string {
	return fmt.Sprintf("%s %s\nworkflow: %s\nui: %s\n", s.verb(), s.TaskID, s.WorkflowID, s.UIURL)
}

// startTask starts the task of in on queue, or attaches to the task of its
// id that is running with the same input. A task id that ran already, or
// runs with another input, is one sentence (a usage error), nothing
// started or changed. `starter run`, `starter demo` and run_task start
// tasks through it.
func (a *app) startTask(ctx context.Context, c client.Client, opts client.Options, queue string, in workflows.AgentTaskInput) (startedTask, error) {
	wid := workflows.WorkflowID(in.TaskID)
	startID := taskstart.NewStartID()
	sopts := taskstart.Options(in, queue, a.taskPriority(in.Tenant, in.Priority), startID)
	// A start refused for attributes the namespace has registered but the
	// server does not serve yet is retried: the id is fixed and the
	// policies of taskstart.Options make a retry return the run an earlier try made.
	run, err := startWhileAttributesPropagate(ctx, c, opts.Namespace, attributePropagationWait, func() (client.WorkflowRun, error) {
		return c.ExecuteWorkflow(ctx, sopts, workflows.AgentTask, in)
	})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return startedTask{}, usagef("task %s already ran (workflow %s) and task ids are never reused; pick another --id", in.TaskID, wid)
	}
	if err != nil {
		return startedTask{}, fmt.Errorf("start task %s: %w", in.TaskID, err)
	}
	dc := opts.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	joined, err := attached(ctx, c, dc, run, in, startID)
	if err != nil {
		return startedTask{}, err
	}
	return startedTask{TaskID: in.TaskID, WorkflowID: wid, RunID: run.GetRunID(), UIURL: a.cfg.WorkflowURL(opts.Namespace, wid), Attached: joined}, nil
}

// start starts the task on queue, or attaches to the running task of its
// id started with the same input, and, with wait, follows it to its end:
// with live, in the live view (followLive).
func (a *app) start(ctx context.Context, queue string, in workflows.AgentTaskInput, wait, asJSON, live bool) error {
	c, opts, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := a.startTask(ctx, c, opts, queue, in)
	if err != nil {
		return err
	}
	wid, ui := st.WorkflowID, st.UIURL
	if !wait {
		if asJSON {
			return printJSON(a.stdout, st)
		}
		fmt.Fprint(a.stdout, st.text())
		return nil
	}
	info := a.stdout
	if asJSON {
		info = a.stderr
	}
	fmt.Fprintf(info, "%s %s\nui: %s\n", st.verb(), in.TaskID, ui)
	if live {
		return a.followLive(ctx, c, wid, ui)
	}
	stopTalking, stopJournal := a.keepTalking(ctx, c, wid), func() {}
	if !asJSON {
		stopJournal = a.follow(ctx, c, wid)
	}
	res, err := taskstart.AwaitResult(ctx, c, wid, st.RunID)
	stopJournal()
	stopTalking()
	if err != nil {
		return err
	}
	return a.report(res, ui, asJSON)
}

// commentTargets parses the --comment flags: OWNER/NAME#N, each once.
func commentTargets(flags []string) ([]contract.CommentTarget, error) {
	var out []contract.CommentTarget
	seen := map[string]bool{}
	for _, f := range flags {
		issue, err := ghref.ParseIssue(f)
		if err != nil {
			return nil, usagef("--comment %q is not of the form OWNER/NAME#N (an issue or pull request number)", f)
		}
		if seen[f] {
			return nil, usagef("--comment %q is given twice", f)
		}
		seen[f] = true
		out = append(out, contract.CommentTarget{Repo: issue.Repo.String(), Number: issue.Number})
	}
	return out, nil
}
