package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/slack-go/slack"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// reconcileFixture is the activities fixture with reconcilers over the
// sandbox's GitHub and Slack, as the worker wires them.
type reconcileFixture struct {
	*fixture
	acts *activities.Activities
	env  *testsuite.TestActivityEnvironment
	gh   *github.Client

	mu         sync.Mutex
	heartbeats []activities.ReconcileProgress
}

// newReconcileFixture builds the fixture; each option may change the
// dependencies before the activities are built.
func newReconcileFixture(t *testing.T, options ...func(*activities.Deps)) *reconcileFixture {
	t.Helper()
	f := &reconcileFixture{fixture: newFixture(t)}
	gh, err := githubtools.NewClient(f.sb.GitHubURL, "test-token", &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sc := slack.New("xoxb-test", slack.OptionAPIURL(f.sb.SlackURL))
	f.gh = gh
	registry := tool.NewRegistry(githubtools.Tools(gh)...)
	deps := activities.Deps{
		Ledger:      f.ledger,
		Tools:       registry,
		Slack:       sc,
		Reconcilers: reconcilers.NewSet(registry, slackpost.NewMessages(sc)),
		Identity:    "reconcile-worker",
		Now:         time.Now,
		// No jitter, as in newFixture. A test whose Reconcile asks more
		// than once passes halfway: a draw of 0 would ask again at once.
		Random: func() float64 { return 0 },
	}
	for _, o := range options {
		o(&deps)
	}
	f.acts, err = activities.New(deps)
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	f.env = suite.NewTestActivityEnvironment()
	f.env.RegisterActivity(f.acts)
	f.env.SetOnActivityHeartbeatListener(func(info *activity.Info, details converter.EncodedValues) {
		var p activities.ReconcileProgress
		if info.ActivityType.Name != "Reconcile" || details.Get(&p) != nil {
			return
		}
		f.mu.Lock()
		f.heartbeats = append(f.heartbeats, p)
		f.mu.Unlock()
	})
	return f
}

const prArgs = `{"repo":"acme/app","head":"feat","base":"main","title":"Fix","body":"Fixes it."}`

// prepareBranch creates branch feat with one commit, through the tools.
func (f *reconcileFixture) prepareBranch(t *testing.T) {
	t.Helper()
	for _, in := range []contract.ExecuteToolInput{
		{OperationID: "op-branch", Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","from":"main"}`)},
		{OperationID: "op-file", Tool: githubtools.NamePutFile, Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","path":"fix.md","content":"fixed\n","message":"fix"}`)},
	} {
		in.Tenant, in.TaskID, in.TurnID, in.ToolCallID = "d", "T", "T/t1", "call_"+in.OperationID
		if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *reconcileFixture) prInput(t *testing.T) contract.ExecuteToolInput {
	return contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t2", ToolCallID: "call_pr",
		OperationID: "d:T:github_create_pull_request:pr:create:acme/app:feat:main", Tool: githubtools.NameCreatePullRequest,
		Arguments: f.args(t, prArgs)}
}

// unknownPR runs the pull request tool under a fault on pulls/create and
// expects the operation to end UNKNOWN. It returns the input and the fence
// the attempt held.
func (f *reconcileFixture) unknownPR(t *testing.T, kind sandbox.FaultKind) (contract.ExecuteToolInput, int64) {
	t.Helper()
	f.prepareBranch(t)
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/create", Kind: kind, Times: 1}); err != nil {
		t.Fatal(err)
	}
	in := f.prInput(t)
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	expectAppError(t, "ExecuteTool under "+string(kind), err, contract.ErrTypeOperationUnknown)
	op := f.op(t, in.OperationID)
	if op.State != capstan.OutcomeUnknown {
		t.Fatalf("after %s on pulls/create: state %s, want UNKNOWN", kind, op.State)
	}
	return in, op.Fence
}

func (f *reconcileFixture) reconcile(t *testing.T, in contract.ReconcileInput) contract.ReconcileResult {
	t.Helper()
	v, err := f.env.ExecuteActivity(f.acts.Reconcile, in)
	if err != nil {
		t.Fatalf("Reconcile(%s): %v", in.OperationID, err)
	}
	var res contract.ReconcileResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *reconcileFixture) op(t *testing.T, id string) ledger.Operation {
	t.Helper()
	op, err := f.ledger.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// toolMessage reads a committed tool message.
func (f *reconcileFixture) toolMessage(t *testing.T, ref string) (model.Message, map[string]any) {
	t.Helper()
	data, err := f.ledger.GetItem(context.Background(), ref)
	if err != nil {
		t.Fatalf("tool message %q: %v", ref, err)
	}
	var msg model.Message
	var content map[string]any
	if err := json.Unmarshal(data, &msg); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(msg.Content), &content); err != nil {
		t.Fatalf("tool message content %q: %v", msg.Content, err)
	}
	return msg, content
}

func (f *reconcileFixture) prURL(t *testing.T, number int) string {
	t.Helper()
	pr, _, err := f.gh.PullRequests.Get(context.Background(), "acme", "app", number)
	if err != nil {
		t.Fatal(err)
	}
	return pr.GetHTMLURL()
}

func expectAppError(t *testing.T, what string, err error, errType string) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != errType {
		t.Fatalf("%s: error %v, want an application error of type %s", what, err, errType)
	}
	return appErr
}

// GitHub opened the pull request but the answer was lost: the reconciler
// finds it, records SUCCEEDED under a new fence, tells the model the call
// was recovered, and nothing is sent twice — not by a retry, not by the lost
// attempt waking up.
func TestReconcileFindsAPullRequestRecordedUnknown(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t)
	in, oldFence := f.unknownPR(t, sandbox.FaultDrop)
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Fatalf("pull requests created = %d, want 1 (the drop lets it happen)", n)
	}
	url := f.prURL(t, 1)

	rin := contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 5 * time.Second, Arguments: in.Arguments}
	res := f.reconcile(t, rin)
	if res.Verdict != capstan.VerdictFound || res.State != capstan.OutcomeSucceeded || res.ExternalID != url || res.Asked != 1 || res.Reason == "" {
		t.Fatalf("Reconcile = %+v, want found %s at the first question", res, url)
	}
	op := f.op(t, in.OperationID)
	if op.State != capstan.OutcomeSucceeded || op.ExternalID != url || op.Fence != oldFence+1 || op.AttemptCount != 1 {
		t.Fatalf("ledger row %+v, want SUCCEEDED with the URL under fence %d after one attempt", op, oldFence+1)
	}
	msg, content := f.toolMessage(t, res.Item)
	if msg.Role != model.RoleTool || msg.ToolCallID != "call_pr" || content["recovered"] != true ||
		content["external_id"] != url || !strings.Contains(content["note"].(string), "found afterwards") {
		t.Fatalf("tool message %+v / %v, want a recovered note for call_pr", msg, content)
	}
	f.mu.Lock()
	beats := append([]activities.ReconcileProgress(nil), f.heartbeats...)
	f.mu.Unlock()
	// The SDK throttles heartbeats (the test environment has no heartbeat
	// timeout, so the first beat is all that gets through): Reconcile sends
	// nothing as it starts, and beats its progress once the first question
	// is answered.
	if len(beats) == 0 || beats[0].Asked != 1 || !strings.Contains(beats[0].Last, "carries the operation's marker") {
		t.Errorf("heartbeats %+v, want a first one after the first question, with its answer", beats)
	}
	// It says what it looks for and until when (starter follow shows it).
	if len(beats) > 0 && (!strings.Contains(beats[0].LookingFor, "a pull request of") || beats[0].AbsentBy.IsZero() ||
		!strings.Contains(beats[0].Line(), "; absent if not seen by ")) {
		t.Errorf("heartbeat %+v, want what the reconciler looks for and the end of its window", beats[0])
	}

	// The lost attempt wakes up and records what it thinks happened: fenced.
	for _, st := range []capstan.Outcome{capstan.OutcomeFailed, capstan.OutcomeUnknown, capstan.OutcomeSucceeded} {
		err := f.ledger.Complete(context.Background(), ledger.Completion{ID: in.OperationID, Fence: oldFence, State: st, ExternalID: "zombie"})
		if !errors.Is(err, ledger.ErrFenced) {
			t.Fatalf("zombie Complete(%s) with fence %d: %v, want ErrFenced", st, oldFence, err)
		}
	}
	if after := f.op(t, in.OperationID); after.State != capstan.OutcomeSucceeded || after.ExternalID != url || after.Fence != op.Fence {
		t.Fatalf("after the zombie: %+v, want the verdict to stand", after)
	}

	// A retried Reconcile reports what the ledger knows, asking nothing,
	// with the very same tool message.
	requests := f.sb.GitHub.Stats().Requests
	again := f.reconcile(t, rin)
	if again.Verdict != capstan.VerdictFound || again.ExternalID != url || again.Item != res.Item || again.Asked != 0 {
		t.Fatalf("second Reconcile = %+v, want found %s with item %s and no question", again, url, res.Item)
	}
	if n := f.sb.GitHub.Stats().Requests; n != requests {
		t.Errorf("the second Reconcile sent %d requests to GitHub, want none", n-requests)
	}
	// The tool replays the recorded success; the pull request exists once.
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var replay contract.ExecuteToolResult
	if err := v.Get(&replay); err != nil || !replay.Replayed || replay.ExternalID != url {
		t.Fatalf("ExecuteTool after reconciliation = %+v, %v; want the recorded success replayed", replay, err)
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Errorf("pull requests created = %d, want exactly 1", n)
	}
}

// GitHub failed before acting: nothing is seen through the whole window, so
// the operation is ABSENT and the same id may be executed again — once.
func TestReconcileAbsentAfterTheWindow(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t, halfway)
	in, _ := f.unknownPR(t, sandbox.FaultFail)
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 0 {
		t.Fatalf("pull requests created = %d, want 0", n)
	}
	const window = time.Second
	// The window runs from the ledger's record of the attempt (its
	// unknown), on the ledger's clock, which for this SQLite file is
	// time.Now.
	start := f.op(t, in.OperationID).UpdatedAt
	res := f.reconcile(t, contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: window, Arguments: in.Arguments})
	elapsed := time.Since(start)
	if res.Verdict != capstan.VerdictAbsent || res.State != capstan.OutcomeAbsent || res.Item != "" || res.ExternalID != "" {
		t.Fatalf("Reconcile = %+v, want absent", res)
	}
	if res.Asked < 2 || elapsed < window {
		t.Fatalf("absent after %d questions in %v, want at least 2 questions over the whole %v window", res.Asked, elapsed, window)
	}
	if op := f.op(t, in.OperationID); op.State != capstan.OutcomeAbsent || op.Error != res.Reason {
		t.Fatalf("ledger row %+v, want ABSENT with the reason", op)
	}
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var out contract.ExecuteToolResult
	if err := v.Get(&out); err != nil || out.State != capstan.OutcomeSucceeded || out.Replayed {
		t.Fatalf("ExecuteTool after absent = %+v, %v; want it sent and SUCCEEDED", out, err)
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Errorf("pull requests created = %d, want 1", n)
	}
}

// The list lags behind the write by less than the window: "not yet", then
// found on a later question.
func TestReconcileLaggingListIsFoundOnALaterQuestion(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t, halfway)
	in, _ := f.unknownPR(t, sandbox.FaultDrop)
	const lag = 2 * time.Second
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultLag, Lag: lag}); err != nil {
		t.Fatal(err)
	}
	res := f.reconcile(t, contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 30 * time.Second, Arguments: in.Arguments})
	if res.Verdict != capstan.VerdictFound || res.ExternalID != f.prURL(t, 1) || res.Asked < 2 {
		t.Fatalf("Reconcile = %+v, want found on a later question", res)
	}
	var fired int
	for _, st := range f.sb.GitHub.Faults() {
		if st.Kind == sandbox.FaultLag {
			fired = st.Fired
		}
	}
	if fired != res.Asked {
		t.Errorf("the lagging list answered %d times, want one per question (%d)", fired, res.Asked)
	}
	if op := f.op(t, in.OperationID); op.State != capstan.OutcomeSucceeded {
		t.Fatalf("ledger state %s, want SUCCEEDED", op.State)
	}
}

// The list fails throughout: a reconciler that cannot ask never concludes
// absent. Past the window it is indeterminate, the operation NEEDS_HUMAN,
// nothing may be sent; then a person confirms it and the model is told.
func TestReconcileFailingListIsIndeterminateThenAPersonResolves(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t, halfway)
	in, oldFence := f.unknownPR(t, sandbox.FaultDrop)
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultFail, Status: 503}); err != nil {
		t.Fatal(err)
	}
	rin := contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 300 * time.Millisecond, Arguments: in.Arguments}
	res := f.reconcile(t, rin)
	if res.Verdict != capstan.VerdictIndeterminate || res.State != capstan.OutcomeNeedsHuman || res.Asked < 2 ||
		!strings.Contains(res.Reason, "could not ask") || !strings.Contains(res.Reason, "503") {
		t.Fatalf("Reconcile = %+v, want indeterminate because the list could not be read", res)
	}
	op := f.op(t, in.OperationID)
	if op.State != capstan.OutcomeNeedsHuman || op.Error != res.Reason || op.Fence != oldFence+1 {
		t.Fatalf("ledger row %+v, want NEEDS_HUMAN with the reason under fence %d", op, oldFence+1)
	}
	// The attempt that sent the request cannot overwrite NEEDS_HUMAN, and
	// the tool will not send again.
	err := f.ledger.Complete(context.Background(), ledger.Completion{ID: in.OperationID, Fence: oldFence, State: capstan.OutcomeFailed})
	if !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("zombie Complete: %v, want ErrFenced", err)
	}
	_, err = f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	expectAppError(t, "ExecuteTool on NEEDS_HUMAN", err, contract.ErrTypeOperationUnknown)
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Fatalf("pull requests created = %d, want 1", n)
	}

	// A person looked and found it. GitHub is asked once, to read the
	// pull request back (issue 14 item 9), and nothing is sent.
	url := f.prURL(t, 1)
	requests := f.sb.GitHub.Stats().Requests
	rin.Resolution = &contract.Resolution{Verdict: capstan.VerdictFound, ExternalID: url}
	res = f.reconcile(t, rin)
	if res.Verdict != capstan.VerdictFound || res.State != capstan.OutcomeSucceeded || res.ExternalID != url || res.Asked != 0 {
		t.Fatalf("Reconcile with a person's resolution = %+v, want found %s", res, url)
	}
	if st := f.sb.GitHub.Stats(); st.Requests != requests+1 || st.PullRequestsCreated != 1 {
		t.Errorf("recording a person's verdict sent %d requests to GitHub and left %d pull requests created, want 1 (the read back) and 1", st.Requests-requests, st.PullRequestsCreated)
	}
	if op := f.op(t, in.OperationID); op.State != capstan.OutcomeSucceeded || op.ExternalID != url || op.Fence != oldFence+2 {
		t.Fatalf("ledger row %+v, want SUCCEEDED with the person's URL under fence %d", op, oldFence+2)
	}
	_, content := f.toolMessage(t, res.Item)
	if content["recovered"] != true || content["external_id"] != url || !strings.Contains(content["note"].(string), "a person confirmed") {
		t.Fatalf("tool message %v, want a note that a person confirmed the call", content)
	}
}

// A person says absent: ABSENT, and the tool may send again.
func TestReconcileRecordsAPersonsAbsent(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t, halfway)
	in, _ := f.unknownPR(t, sandbox.FaultFail)
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultFail}); err != nil {
		t.Fatal(err)
	}
	rin := contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 100 * time.Millisecond, Arguments: in.Arguments}
	if res := f.reconcile(t, rin); res.State != capstan.OutcomeNeedsHuman {
		t.Fatalf("Reconcile = %+v, want NEEDS_HUMAN", res)
	}
	f.sb.GitHub.ClearFaults()

	for _, bad := range []*contract.Resolution{
		{Verdict: capstan.VerdictFound},
		{Verdict: capstan.VerdictIndeterminate},
		{Verdict: "abort"},
	} {
		before := f.op(t, in.OperationID)
		bin := rin
		bin.Resolution = bad
		_, err := f.env.ExecuteActivity(f.acts.Reconcile, bin)
		appErr := expectAppError(t, "resolution "+string(bad.Verdict), err, contract.ErrTypeInvalidResolution)
		if !appErr.NonRetryable() {
			t.Errorf("resolution %+v: error is retryable", bad)
		}
		if after := f.op(t, in.OperationID); after.Fence != before.Fence || after.State != before.State {
			t.Fatalf("an invalid resolution changed the operation: %+v → %+v", before, after)
		}
	}

	rin.Resolution = &contract.Resolution{Verdict: capstan.VerdictAbsent}
	res := f.reconcile(t, rin)
	if res.Verdict != capstan.VerdictAbsent || res.State != capstan.OutcomeAbsent || res.Item != "" {
		t.Fatalf("Reconcile with absent = %+v", res)
	}
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var out contract.ExecuteToolResult
	if err := v.Get(&out); err != nil || out.State != capstan.OutcomeSucceeded {
		t.Fatalf("ExecuteTool after a person's absent = %+v, %v", out, err)
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Errorf("pull requests created = %d, want 1", n)
	}
}

// A Slack delivery whose answer was lost is found by its metadata; a
// delivery has no tool message.
func TestReconcileFindsASlackDelivery(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t)
	if err := f.sb.Slack.AddFault(sandbox.FaultRule{Endpoint: "chat.postMessage", Kind: sandbox.FaultDrop, Times: 1}); err != nil {
		t.Fatal(err)
	}
	din := contract.DeliverInput{Tenant: "d", TaskID: "T", OperationID: "d:T:deliver:slack:#ops", Channel: "#ops", Text: "Done."}
	_, err := f.env.ExecuteActivity(f.acts.Deliver, din)
	expectAppError(t, "Deliver under a drop", err, contract.ErrTypeOperationUnknown)
	msgs := f.sb.Slack.Messages("#ops")
	if len(msgs) != 1 {
		t.Fatalf("messages = %+v, want 1", msgs)
	}
	res := f.reconcile(t, contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: din.OperationID,
		Since: time.Now(), Window: 5 * time.Second, Channel: "#ops"})
	// Found under the channel's id, as Slack names it in its answer to a post.
	if want := f.sb.Slack.ChannelID("#ops") + "/" + msgs[0].TS; res.Verdict != capstan.VerdictFound || res.ExternalID != want || res.Item != "" {
		t.Fatalf("Reconcile = %+v, want found %s without a tool message", res, want)
	}
	v, err := f.env.ExecuteActivity(f.acts.Deliver, din)
	if err != nil {
		t.Fatal(err)
	}
	var out contract.DeliverResult
	if err := v.Get(&out); err != nil || !out.Replayed || out.ExternalID != res.ExternalID {
		t.Fatalf("Deliver after reconciliation = %+v, %v; want the recorded delivery replayed", out, err)
	}
	if n := f.sb.Slack.Stats().MessagesPosted; n != 1 {
		t.Errorf("messages posted = %d, want 1", n)
	}
}

// While another attempt holds a live lease, Reconcile neither asks nor
// writes: Temporal retries it when the lease ends.
func TestReconcileWaitsForALiveLease(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t)
	ctx := context.Background()
	claim, err := f.ledger.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: "op-busy", Kind: githubtools.NameComment, RequestHash: "h"},
		Owner: "other-worker#1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ledger.MarkRunning(ctx, "op-busy", claim.Op.Fence, nil); err != nil {
		t.Fatal(err)
	}
	before := f.op(t, "op-busy")
	requests := f.sb.GitHub.Stats().Requests
	_, err = f.env.ExecuteActivity(f.acts.Reconcile, contract.ReconcileInput{OperationID: "op-busy", Since: time.Now(),
		Arguments: f.args(t, `{"repo":"acme/app","number":1,"body":"hi"}`)})
	appErr := expectAppError(t, "Reconcile under a live lease", err, contract.ErrTypeOperationInProgress)
	if appErr.NonRetryable() || !strings.Contains(appErr.Error(), "other-worker#1") {
		t.Errorf("error %v, want a retryable one naming the holder", appErr)
	}
	if after := f.op(t, "op-busy"); after.Fence != before.Fence || after.LeaseOwner != before.LeaseOwner {
		t.Fatalf("the refused Reconcile changed the operation: %+v → %+v", before, after)
	}
	if n := f.sb.GitHub.Stats().Requests; n != requests {
		t.Errorf("the refused Reconcile sent %d requests", n-requests)
	}
}

// A worker without reconcilers fails as misconfigured, and hands the
// operation back so that a worker that has them takes it at once.
func TestReconcileWithoutReconcilersHandsTheOperationBack(t *testing.T) {
	t.Parallel()
	f := newReconcileFixture(t)
	in, oldFence := f.unknownPR(t, sandbox.FaultDrop)
	rin := contract.ReconcileInput{Tenant: "d", TaskID: "T", OperationID: in.OperationID, ToolCallID: "call_pr",
		Since: time.Now(), Window: 5 * time.Second, Arguments: in.Arguments}
	_, err := f.fixture.env.ExecuteActivity(f.fixture.acts.Reconcile, rin) // the plain fixture has no reconcilers
	appErr := expectAppError(t, "Reconcile without reconcilers", err, contract.ErrTypeWorkerConfig)
	if !appErr.NonRetryable() {
		t.Errorf("error %v is retryable", appErr)
	}
	op := f.op(t, in.OperationID)
	if op.State != capstan.OutcomeUnknown || !op.LeaseExpiresAt.IsZero() || op.Fence != oldFence+1 {
		t.Fatalf("after the misconfigured worker: %+v, want UNKNOWN without a lease at fence %d", op, oldFence+1)
	}
	if res := f.reconcile(t, rin); res.Verdict != capstan.VerdictFound {
		t.Fatalf("Reconcile on a configured worker = %+v, want found", res)
	}
}
