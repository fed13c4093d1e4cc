package capstantest_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/capstantest"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workerapp"
)

// devServer starts a dev server from the CLI capstan's tests use (the
// repository's .bin/temporal when CAPSTAN_TEMPORAL_BIN is unset).
func devServer(t *testing.T) *capstantest.DevServer {
	t.Helper()
	bin, err := testenv.TemporalCLI()
	if err != nil {
		t.Skip(err)
	}
	return capstantest.StartDevServer(t, bin)
}

// startWorker runs an ordinary in-process worker on queue, pointed at the
// sandbox through its Env, with a ledger of its own.
func startWorker(t *testing.T, dev *capstantest.DevServer, sb *capstantest.Sandbox, queue string) {
	t.Helper()
	env := maps.Clone(sb.Env())
	env["CAPSTAN_TASK_QUEUE"] = queue
	env["CAPSTAN_LEDGER_DSN"] = "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	env["CAPSTAN_METRICS_ADDR"] = ""
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	ctx, cancel := context.WithCancel(context.Background())
	w, err := workerapp.New(ctx, workerapp.Options{
		Config:    config.FromLookupEnv(lookup),
		LookupEnv: lookup,
		Dial: func(ctx context.Context, identity string, logger tlog.Logger, metrics client.MetricsHandler) (client.Client, client.Options, error) {
			opts := client.Options{HostPort: dev.Address(), Namespace: dev.Namespace(), Identity: identity, Logger: logger, MetricsHandler: metrics}
			c, err := client.Dial(opts)
			return c, opts, err
		},
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		StopTimeout: time.Second,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		w.Close()
	})
}

// commentScript is a model that comments on issue number of repo once,
// then says it is done.
func commentScript(sb *capstantest.Sandbox, name, repo string, number int) {
	sb.Script(name,
		capstantest.Step{Text: "Commenting.", Calls: []capstantest.Call{{Tool: "github_comment",
			Arguments: map[string]any{"repo": repo, "number": number, "body": "Looked at it in task {{task_id}}."}}}},
		capstantest.Step{Text: "Done: I commented."},
	)
}

func TestTasks(t *testing.T) {
	dev := devServer(t)
	sb := capstantest.StartSandbox(t)
	const queue, repo = "capstantest", "acme/app"
	startWorker(t, dev, sb, queue)
	c := dev.Client(t)

	// A task scripted to comment runs; its one operation succeeded and
	// names the comment.
	t.Run("comment", func(t *testing.T) {
		issue := sb.CreateIssue(repo, "Printer on fire")
		commentScript(sb, "comment-once", repo, issue)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		task := capstantest.StartTask(t, c, capstantest.TaskOptions{Prompt: "Comment on the issue.", Model: "openai:comment-once",
			TaskQueue: queue, Repository: repo})
		res, err := task.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != capstantest.StatusCompleted || res.Answer != "Done: I commented." {
			t.Fatalf("result %+v, want completed with the script's answer", res)
		}
		ops, err := task.Operations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ops) != 1 || ops[0].Tool != "github_comment" || ops[0].Outcome != capstan.OutcomeSucceeded || ops[0].ExternalID == "" {
			t.Fatalf("operations %+v, want one github_comment succeeded with an external id", ops)
		}
		comments := sb.Comments(repo, issue)
		// The tool adds the operation's marker, which its lookup finds.
		if len(comments) != 1 || !strings.HasPrefix(comments[0].Body, "Looked at it in task "+task.ID()+".") {
			t.Fatalf("comments %+v, want the one the script wrote, {{task_id}} expanded", comments)
		}
		t.Logf("operation %s: %s %s", ops[0].ID, ops[0].Outcome, ops[0].ExternalID)
	})

	// GitHub acts on the comment and loses the answer: the task still
	// leaves exactly one comment.
	t.Run("drop", func(t *testing.T) {
		issue := sb.CreateIssue(repo, "Printer still on fire")
		commentScript(sb, "comment-dropped", repo, issue)
		before := sb.Counts().Comments
		sb.InjectFault(capstantest.Fault{Service: capstantest.GitHub, Endpoint: "issues/create-comment", Kind: capstantest.FaultDrop, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		task := capstantest.StartTask(t, c, capstantest.TaskOptions{Prompt: "Comment on the issue.", Model: "openai:comment-dropped",
			TaskQueue: queue, Repository: repo})
		res, err := task.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != capstantest.StatusCompleted {
			t.Fatalf("result %+v, want completed", res)
		}
		if got := sb.Counts().Comments - before; got != 1 || len(sb.Comments(repo, issue)) != 1 {
			t.Fatalf("%d comments created, %d on the issue; want exactly one", got, len(sb.Comments(repo, issue)))
		}
		if len(res.Operations) != 1 || res.Operations[0].Outcome != capstan.OutcomeSucceeded || res.Operations[0].ExternalID == "" {
			t.Fatalf("operations %+v, want one succeeded with an external id", res.Operations)
		}
		t.Logf("operation %+v", res.Operations[0])
	})

	// An operation that waits for approval is found with WaitForOutcome
	// and sent once approved.
	t.Run("approve", func(t *testing.T) {
		issue := sb.CreateIssue(repo, "Approve me")
		commentScript(sb, "comment-approved", repo, issue)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		task := capstantest.StartTask(t, c, capstantest.TaskOptions{Prompt: "Comment on the issue.", Model: "openai:comment-approved",
			TaskQueue: queue, Repository: repo, RequireApproval: []string{"github_comment"}})
		op, err := task.WaitForOutcome(ctx, capstan.OutcomeAwaitingApproval)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(sb.Comments(repo, issue)); n != 0 {
			t.Fatalf("%d comments before the approval", n)
		}
		if err := task.Approve(ctx, op.ID); err != nil {
			t.Fatal(err)
		}
		res, err := task.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != capstantest.StatusCompleted || len(sb.Comments(repo, issue)) != 1 || res.Operations[0].Approval != "approved" {
			t.Fatalf("result %+v, comments %d: want completed, one comment, approved", res, len(sb.Comments(repo, issue)))
		}
	})

	// A denied operation sends nothing; the model reads the reason and
	// the task goes on to its answer.
	t.Run("deny", func(t *testing.T) {
		issue := sb.CreateIssue(repo, "Deny me")
		commentScript(sb, "comment-denied", repo, issue)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		task := capstantest.StartTask(t, c, capstantest.TaskOptions{Prompt: "Comment on the issue.", Model: "openai:comment-denied",
			TaskQueue: queue, Repository: repo, RequireApproval: []string{"unsafe", "conditional", "idempotent"}})
		op, err := task.WaitForOutcome(ctx, capstan.OutcomeAwaitingApproval)
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Deny(ctx, op.ID, "not today"); err != nil {
			t.Fatal(err)
		}
		res, err := task.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != capstantest.StatusCompleted || len(sb.Comments(repo, issue)) != 0 ||
			res.Operations[0].Outcome != capstan.OutcomeDenied || res.Operations[0].Approval != "denied" {
			t.Fatalf("result %+v, comments %d: want completed, no comment, the operation denied", res, len(sb.Comments(repo, issue)))
		}
	})

	// GitHub loses the comment's answer and its listings fail, so nobody
	// can tell whether the comment exists: the operation needs a person,
	// who says it was found.
	t.Run("resolve", func(t *testing.T) {
		issue := sb.CreateIssue(repo, "Nobody can tell")
		commentScript(sb, "comment-resolved", repo, issue)
		sb.InjectFault(capstantest.Fault{Service: capstantest.GitHub, Endpoint: "issues/create-comment", Kind: capstantest.FaultDrop, Times: 1})
		for _, e := range []string{"issues/list-comments", "issues/list-comments-for-repo", "issues/get-comment"} {
			sb.InjectFault(capstantest.Fault{Service: capstantest.GitHub, Endpoint: e, Kind: capstantest.FaultFail})
		}
		defer sb.ClearFaults()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// A short window: nobody can tell sooner.
		task := capstantest.StartTask(t, c, capstantest.TaskOptions{Prompt: "Comment on the issue.", Model: "openai:comment-resolved",
			TaskQueue: queue, Repository: repo, ReconcileWindow: 3 * time.Second})
		op, err := task.WaitForOutcome(ctx, capstan.OutcomeNeedsHuman)
		if err != nil {
			t.Fatal(err)
		}
		sb.ClearFaults()
		comments := sb.Comments(repo, issue)
		if len(comments) != 1 {
			t.Fatalf("%d comments, want the one whose answer was lost", len(comments))
		}
		url := fmt.Sprintf("%s%s/issues/%d#issuecomment-%d", strings.TrimSuffix(sb.GitHubURL(), "/")+"/", repo, issue, comments[0].ID)
		if err := task.ResolveFound(ctx, op.ID, url); err != nil {
			t.Fatal(err)
		}
		res, err := task.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != capstantest.StatusCompleted || len(sb.Comments(repo, issue)) != 1 ||
			res.Operations[0].Outcome != capstan.OutcomeSucceeded || res.Operations[0].ResolvedBy == "" {
			t.Fatalf("result %+v: want completed, one comment, the operation succeeded as resolved", res)
		}
	})
}
