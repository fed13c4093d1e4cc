package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/model/openai"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// fixture wires real activities to a real SQLite ledger and the sandbox's
// loopback servers.
type fixture struct {
	acts   *activities.Activities
	ledger *sqlite.Store
	sb     *sandbox.Sandbox
	env    *testsuite.TestActivityEnvironment
	path   string // the ledger's SQLite file
}

// newFixture builds the fixture; each option may change the dependencies
// before the activities are built.
func newFixture(t testing.TB, options ...func(*activities.Deps)) *fixture {
	t.Helper()
	sb, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	path := filepath.Join(t.TempDir(), "ledger.db")
	store, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	gh, err := githubtools.NewClient(sb.GitHubURL, "test-token", http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	deps := activities.Deps{
		Ledger:    store,
		Providers: map[string]model.Provider{"sandbox": openai.New(openai.Config{BaseURL: sb.ModelURL, APIKey: "test-key"})},
		Tools:     tool.NewRegistry(githubtools.Tools(gh)...),
		Slack:     slack.New("xoxb-test", slack.OptionAPIURL(sb.SlackURL)),
		Identity:  "test-worker",
		Now:       time.Now,
		// No jitter: a retry's delay is exactly the wait the service or
		// the breaker asked for. retry_test.go draws jitter.
		Random: func() float64 { return 0 },
	}
	for _, o := range options {
		o(&deps)
	}
	acts, err := activities.New(deps)
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return &fixture{acts: acts, ledger: store, sb: sb, env: env, path: path}
}

// args stores tool arguments in the ledger, as ModelTurn does, and returns
// their reference.
func (f *fixture) args(t testing.TB, s string) string {
	t.Helper()
	ref, err := f.ledger.PutItem(context.Background(), []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestExecuteToolActsOnceAndReplaysTheStoredResult(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	args := json.RawMessage(`{"repo":"acme/app","branch":"agent/x","from":"main"}`)
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_1",
		OperationID: "default:T1:github_create_branch:branch:create:acme/app:agent/x", Tool: githubtools.NameCreateBranch, Arguments: f.args(t, string(args))}

	var first, second contract.ExecuteToolResult
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Get(&first)
	in.ToolCallID = "call_2" // a re-declared call with the same business identity
	v, err = f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Get(&second)

	if first.State != capstan.OutcomeSucceeded || first.Replayed || !strings.HasPrefix(first.ExternalID, "refs/heads/agent/x@") {
		t.Errorf("first = %+v, want SUCCEEDED with the ref", first)
	}
	if second.State != capstan.OutcomeSucceeded || !second.Replayed || second.ExternalID != first.ExternalID {
		t.Errorf("second = %+v, want the stored result, replayed", second)
	}
	if n := f.sb.GitHub.Stats().BranchesCreated; n != 1 {
		t.Errorf("branches created = %d, want 1", n)
	}
	op, err := f.ledger.Get(context.Background(), in.OperationID)
	if err != nil || op.State != capstan.OutcomeSucceeded || op.AttemptCount != 1 {
		t.Errorf("ledger row = %+v, %v; want SUCCEEDED after one attempt", op, err)
	}
	// The tool message of the replay tells the model nothing was sent again.
	data, err := f.ledger.GetItem(context.Background(), second.Item)
	if err != nil {
		t.Fatal(err)
	}
	var msg model.Message
	if err := json.Unmarshal(data, &msg); err != nil || msg.ToolCallID != "call_2" || !strings.Contains(msg.Content, `"replayed":true`) {
		t.Errorf("replayed tool message = %s, %v", data, err)
	}
}

func TestExecuteToolConflictOnReusedOperationID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", OperationID: "op-1",
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/app","branch":"a","from":"main"}`)}
	if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in); err != nil {
		t.Fatal(err)
	}
	in.Arguments = f.args(t, `{"repo":"acme/app","branch":"b","from":"main"}`)
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeOperationConflict {
		t.Fatalf("err = %v, want %s", err, contract.ErrTypeOperationConflict)
	}
	if n := f.sb.GitHub.Stats().BranchesCreated; n != 1 {
		t.Errorf("branches created = %d, want 1", n)
	}
}

// A branch created again under its business key with another "from" is a
// refusal the model reads, naming the branch and the commit it was created
// at; nothing is sent, and the first operation stands.
func TestExecuteToolRecreatedBranchIsRefusedToTheModel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", OperationID: "op-1",
		ToolCallID: "call_1", Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/app","branch":"agent/x","from":"main"}`)}
	var first, again contract.ExecuteToolResult
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Get(&first)
	in.TurnID, in.ToolCallID = "T1/t2", "call_2"
	in.Arguments = f.args(t, `{"repo":"acme/app","branch":"agent/x","from":"develop"}`)
	v, err = f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatalf("creating the branch again: %v, want a refusal the model reads", err)
	}
	_ = v.Get(&again)
	if again.State != capstan.OutcomeFailed || again.Replayed {
		t.Errorf("again = %+v, want FAILED (refused)", again)
	}
	data, err := f.ledger.GetItem(context.Background(), again.Item)
	if err != nil {
		t.Fatal(err)
	}
	var msg model.Message
	if err := json.Unmarshal(data, &msg); err != nil || msg.ToolCallID != "call_2" ||
		!strings.Contains(msg.Content, `"error"`) || !strings.Contains(msg.Content, "exists: "+first.ExternalID) {
		t.Errorf("tool message = %s, %v; want an error saying the branch exists as %s", data, err, first.ExternalID)
	}
	op, err := f.ledger.Get(context.Background(), in.OperationID)
	if err != nil || op.State != capstan.OutcomeSucceeded || op.ExternalID != first.ExternalID || op.AttemptCount != 1 {
		t.Errorf("ledger row = %+v, %v; want the first call's, SUCCEEDED", op, err)
	}
	if n := f.sb.GitHub.Stats().BranchesCreated; n != 1 {
		t.Errorf("branches created = %d, want 1", n)
	}
}

func TestExecuteToolTimeoutAfterSendIsUnknown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// GitHub creates the pull request, but the answer never arrives.
	f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/pulls") {
			return false
		}
		next.ServeHTTP(&discard{header: http.Header{}}, r)
		panic(http.ErrAbortHandler) // drop the connection
	})
	ctx := context.Background()
	branch := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", OperationID: "op-branch",
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","from":"main"}`)}
	if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, branch); err != nil {
		t.Fatal(err)
	}
	file := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", OperationID: "op-file",
		Tool: githubtools.NamePutFile, Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","path":"a.md","content":"a\n","message":"a"}`)}
	if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, file); err != nil {
		t.Fatal(err)
	}
	pr := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t2", OperationID: "op-pr",
		Tool: githubtools.NameCreatePullRequest, Arguments: f.args(t, `{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`)}
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, pr)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeOperationUnknown || !appErr.NonRetryable() {
		t.Fatalf("err = %v, want a non-retryable %s", err, contract.ErrTypeOperationUnknown)
	}
	op, _ := f.ledger.Get(ctx, "op-pr")
	if op.State != capstan.OutcomeUnknown {
		t.Fatalf("ledger state = %s, want UNKNOWN (never FAILED after the request left)", op.State)
	}
	// A retry does not send again: it must reconcile first.
	f.sb.GitHub.SetFault(nil)
	_, err = f.env.ExecuteActivity(f.acts.ExecuteTool, pr)
	if !errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeOperationUnknown {
		t.Fatalf("retry err = %v, want %s", err, contract.ErrTypeOperationUnknown)
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Errorf("pull requests created = %d, want exactly 1", n)
	}
}

// discard is a ResponseWriter that throws the answer away.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

func TestModelTurnCommitsOnlyACompletedAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1", Model: "sandbox:demo",
		Seed: []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "go"}}}
	v, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
	if err != nil {
		t.Fatal(err)
	}
	var out contract.ModelTurnResult
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.ToolCalls) != 1 || out.ToolCalls[0].Name != githubtools.NameCreateBranch || out.Phase != model.PhaseStreamCompleted {
		t.Fatalf("out = %+v, want one create_branch call from a completed stream", out)
	}
	// The usage the sandbox reported, not an estimate, is what it spent.
	if out.Usage.InputTokens <= 0 || out.Usage.OutputTokens <= 0 || out.UsageEstimated {
		t.Errorf("usage = %+v (estimated %v), want the provider's input and output tokens", out.Usage, out.UsageEstimated)
	}
	call := out.ToolCalls[0]
	stored, err := f.ledger.GetItem(context.Background(), call.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	// Read by the tool's own parser: the stored arguments create the branch of task T.
	impl, _ := f.acts.Tools.Get(call.Name)
	if id, err := impl.Identify(stored); err != nil || id.BusinessKey != "branch:create:capstan-sandbox/demo:capstan/hello-T" {
		t.Errorf("arguments = %s (%v), want the branch of task T", stored, err)
	}
	if call.Class != "conditional" || call.BusinessKey != "branch:create:capstan-sandbox/demo:capstan/hello-T" ||
		call.Summary != "create_branch capstan-sandbox/demo capstan/hello-T from main" {
		t.Errorf("call = %+v, want its class, business key and summary", call)
	}
	// The committed transcript: seed, then the assistant item.
	data, err := f.ledger.GetItem(context.Background(), out.Transcript)
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct{ Items []string }
	if err := json.Unmarshal(data, &manifest); err != nil || len(manifest.Items) != 3 {
		t.Fatalf("manifest = %s, want 3 items", data)
	}
	// The next turn sends the transcript back, and the model sees it.
	in2 := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t2", AttemptID: "T/t2/a1", Model: "sandbox:demo", Transcript: out.Transcript}
	if _, err := f.env.ExecuteActivity(f.acts.ModelTurn, in2); err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Messages []struct{ Role string } `json:"messages"`
	}
	if err := json.Unmarshal(f.sb.Model.LastRequest(), &sent); err != nil || len(sent.Messages) != 3 || sent.Messages[2].Role != "assistant" {
		t.Errorf("second request messages = %+v, want system, user, assistant", sent.Messages)
	}

	// An attempt cut for silence commits nothing and says why.
	f.sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking\"}}]}\n\n"))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // then silence
		return true
	})
	in3 := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t3", AttemptID: "T/t3/a1", Model: "sandbox:demo", Transcript: out.Transcript,
		Limits: model.Limits{Idle: 300 * time.Millisecond, HeartbeatTimeout: 150 * time.Millisecond}}
	_, err = f.env.ExecuteActivity(f.acts.ModelTurn, in3)
	report, ok := contract.AttemptReportOf(err)
	if !ok {
		t.Fatalf("err = %v, want %s with an contract.AttemptReport", err, contract.ErrTypeModelAttempt)
	}
	if report.Outcome != model.OutcomeCutIdle || report.Phase != model.PhaseStreamPartial || report.Events == 0 || report.AttemptID != "T/t3/a1" {
		t.Errorf("report = %+v, want cut_idle at STREAM_PARTIAL after some events", report)
	}
	// Cut before it reported usage, it counts the estimate.
	if report.Usage.InputTokens <= 0 || !report.UsageEstimated {
		t.Errorf("report usage = %+v (estimated %v), want the estimate of its input", report.Usage, report.UsageEstimated)
	}
}

// A server that takes the request and never answers is cut by the
// first-event watchdog, not left to Temporal's start-to-close timeout.
func TestModelTurnCutsAServerThatNeverAnswers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		<-r.Context().Done()
		return true
	})
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1", Model: "sandbox:hello",
		Seed:   []model.Message{{Role: model.RoleUser, Content: "hi"}},
		Limits: model.Limits{Idle: 200 * time.Millisecond, HeartbeatTimeout: 150 * time.Millisecond}}
	_, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
	report, ok := contract.AttemptReportOf(err)
	if !ok {
		t.Fatalf("err = %v, want %s with an contract.AttemptReport", err, contract.ErrTypeModelAttempt)
	}
	// The request was written and no header came back: the transport
	// recorder says so, rather than UNKNOWN.
	if report.Outcome != model.OutcomeCutIdle || report.Events != 0 || report.Phase != model.PhaseSentNoHeaders {
		t.Errorf("report = %+v, want cut_idle at SENT_NO_HEADERS before any event", report)
	}
	// The request was sent: it counts its input's characters / 4.
	want := activities.EstimateUsage(model.Request{Messages: in.Seed, Tools: f.acts.Tools.Specs()})
	if report.Usage != want || !report.UsageEstimated || want.InputTokens <= 0 {
		t.Errorf("report usage = %+v (estimated %v), want the estimate %+v", report.Usage, report.UsageEstimated, want)
	}
}

// An attempt whose connection is refused reports NOT_SENT: nothing left.
func TestModelTurnRefusedConnectionIsNotSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	acts, err := activities.New(activities.Deps{Ledger: f.ledger, Tools: f.acts.Tools, Identity: "w",
		Providers: map[string]model.Provider{"sandbox": openai.New(openai.Config{BaseURL: "http://" + addr + "/v1", APIKey: "k"})}})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	_, err = env.ExecuteActivity(acts.ModelTurn, contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1",
		Model: "sandbox:hello", Seed: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	report, ok := contract.AttemptReportOf(err)
	if !ok || report.Outcome != model.OutcomeNotSent || report.Phase != model.PhaseNotSent {
		t.Errorf("report = %+v (%v), want not_sent at NOT_SENT", report, err)
	}
	if report.Usage != (model.Usage{}) || report.UsageEstimated {
		t.Errorf("report usage = %+v (estimated %v), want none: nothing was sent", report.Usage, report.UsageEstimated)
	}
}

func TestDeliverPostsWithOperationIDInMetadata(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := contract.DeliverInput{Tenant: "default", TaskID: "T", OperationID: "default:T:deliver:slack:#c", Channel: "#c", Text: "done"}
	for i := 0; i < 2; i++ {
		v, err := f.env.ExecuteActivity(f.acts.Deliver, in)
		if err != nil {
			t.Fatal(err)
		}
		var res contract.DeliverResult
		_ = v.Get(&res)
		if res.Replayed != (i == 1) || res.ExternalID == "" {
			t.Errorf("delivery %d = %+v", i, res)
		}
	}
	msgs := f.sb.Slack.Messages("#c")
	if len(msgs) != 1 || msgs[0].Metadata.EventType != slackpost.EventType || msgs[0].Metadata.EventPayload["operation_id"] != in.OperationID {
		t.Fatalf("messages = %+v, want one carrying the operation id", msgs)
	}
}

func TestExecuteToolWaitsOutAnotherHoldersLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	args := json.RawMessage(`{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`)
	impl, _ := f.acts.Tools.Get(githubtools.NameCreatePullRequest)
	id, _ := impl.Identify(args)
	// Another worker claimed the same operation a moment ago.
	if _, err := f.ledger.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: "op-held", Kind: githubtools.NameCreatePullRequest,
		RequestHash: activities.RequestHash(githubtools.NameCreatePullRequest, id.Effect)}, Owner: "other-worker", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, contract.ExecuteToolInput{OperationID: "op-held", Tool: githubtools.NameCreatePullRequest, Arguments: f.args(t, string(args))})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeOperationInProgress || appErr.NonRetryable() {
		t.Fatalf("err = %v, want a retryable %s", err, contract.ErrTypeOperationInProgress)
	}
	if d := appErr.NextRetryDelay(); d < 50*time.Second || d > 62*time.Second {
		t.Errorf("next retry delay = %s, want about the minute left on the other lease", d)
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 0 {
		t.Errorf("pull requests created = %d, want 0", n)
	}
}

func TestDeliverTellsDefiniteRefusalsFromUnknownOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		slackError string
		wantType   string
		wantState  capstan.Outcome
	}{
		{"channel_not_found", contract.ErrTypeDeliveryFailed, capstan.OutcomeFailed},
		{"internal_error", contract.ErrTypeOperationUnknown, capstan.OutcomeUnknown},
	} {
		t.Run(tc.slackError, func(t *testing.T) {
			f := newFixture(t)
			f.sb.Slack.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"ok":false,"error":"` + tc.slackError + `"}`))
				return true
			})
			_, err := f.env.ExecuteActivity(f.acts.Deliver, contract.DeliverInput{OperationID: "op-d", Channel: "#c", Text: "x"})
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != tc.wantType {
				t.Fatalf("err = %v, want %s", err, tc.wantType)
			}
			if op, _ := f.ledger.Get(context.Background(), "op-d"); op.State != tc.wantState {
				t.Errorf("ledger state = %s, want %s", op.State, tc.wantState)
			}
		})
	}
}

// New refuses to build activities that would fail on their first call.
func TestNewRefusesMissingDependencies(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	full := activities.Deps{Ledger: f.ledger, Tools: f.acts.Tools, Identity: "w"}
	for name, d := range map[string]activities.Deps{
		"Ledger":   {Tools: full.Tools, Identity: "w"},
		"Tools":    {Ledger: full.Ledger, Identity: "w"},
		"Identity": {Ledger: full.Ledger, Tools: full.Tools},
	} {
		if _, err := activities.New(d); !errors.Is(err, activities.ErrMissingDependency) || !strings.Contains(err.Error(), name) {
			t.Errorf("New without %s: %v, want ErrMissingDependency naming it", name, err)
		}
	}
	a, err := activities.New(full)
	if err != nil {
		t.Fatal(err)
	}
	if a.Lease <= 0 || a.Now == nil || a.Logger == nil || a.Providers == nil {
		t.Errorf("defaults not fixed: lease %s, now %v, logger %v, providers %v", a.Lease, a.Now != nil, a.Logger != nil, a.Providers != nil)
	}
}

// A turn commits once: a second ModelTurn for a committed turn id (a lost
// result, a redelivery, a reset) returns the recorded output and never asks
// the model again, so its tool calls keep their identity.
func TestModelTurnNeverResamplesACommittedTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1", Model: "sandbox:demo",
		Seed: []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "go"}}}
	run := func(attempt string) contract.ModelTurnResult {
		in.AttemptID = attempt
		v, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
		if err != nil {
			t.Fatal(err)
		}
		var out contract.ModelTurnResult
		if err := v.Get(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := run("T/t1/a1")
	if first.Replayed {
		t.Fatal("the first attempt says it was replayed")
	}
	again := run("T/t1/a2")
	if n := f.sb.Model.Stats().Requests; n != 1 {
		t.Errorf("the model saw %d requests, want 1: a committed turn was sampled again", n)
	}
	if !again.Replayed || again.Transcript != first.Transcript || len(again.ToolCalls) != 1 ||
		again.ToolCalls[0] != first.ToolCalls[0] || again.AttemptID != first.AttemptID {
		t.Errorf("second ModelTurn = %+v, want the first's output %+v, replayed", again, first)
	}
}
