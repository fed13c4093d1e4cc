package activities_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// withBreakers gives the fixture's activities a breaker set that trips after
// two consecutive failures and stays open for openFor.
func withBreakers(t *testing.T, openFor time.Duration) (*breaker.Set, func(*activities.Deps)) {
	t.Helper()
	set, err := breaker.NewSet(config.BreakerSettings{ConsecutiveFailures: 2, FailureRatio: 0.5, MinCalls: 10,
		Window: time.Minute, OpenFor: openFor}, breaker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return set, func(d *activities.Deps) { d.Breakers = set }
}

func branchInput(f *fixture, t *testing.T, branch, from string) contract.ExecuteToolInput {
	opID := "d:T:github_create_branch:branch:create:acme/app:" + branch
	return contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", OperationID: opID, ToolCallID: "call_" + branch,
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, fmt.Sprintf(`{"repo":"acme/app","branch":%q,"from":%q}`, branch, from))}
}

// breakerOpenError checks err is a retryable BreakerOpen error of key that
// waits at most within and returns its wait.
func breakerOpenError(t *testing.T, err error, key breaker.Key, within time.Duration) time.Duration {
	t.Helper()
	appErr := appError(t, err)
	w, ok := contract.BreakerWaitOf(err)
	if appErr.Type() != contract.ErrTypeBreakerOpen || appErr.NonRetryable() || !ok {
		t.Fatalf("err = %v, want a retryable %s with its wait", err, contract.ErrTypeBreakerOpen)
	}
	if w.Breaker != string(key) || w.State != string(breaker.StateOpen) || w.Wait != appErr.NextRetryDelay() ||
		w.Wait <= 0 || w.Wait > within {
		t.Fatalf("breaker wait = %+v, next retry delay %s; want %s open, the delay being the time left (at most %s)",
			w, appErr.NextRetryDelay(), key, within)
	}
	return w.Wait
}

// While github/write is open, nothing reaches GitHub: not the tool's read
// before its write, not its write, not a comment delivery. The claim is
// released (ABSENT, never marked running) and the activity fails
// BreakerOpen with the time left. Reads have a breaker of their own.
func TestExecuteToolSendsNothingWhileTheBreakerIsOpen(t *testing.T) {
	t.Parallel()
	set, opt := withBreakers(t, time.Minute)
	f := newFixture(t, opt)
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "git/create-ref", Kind: sandbox.FaultFail, Status: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"b1", "b2"} {
		_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, branchInput(f, t, b, "main"))
		if appErr := appError(t, err); appErr.Type() != contract.ErrTypeOperationUnknown {
			t.Fatalf("create %s under a 503: %v, want %s", b, err, contract.ErrTypeOperationUnknown)
		}
	}
	if st := set.State(breaker.GitHubWrite); st != breaker.StateOpen {
		t.Fatalf("after 2 failed writes github/write is %s, want open", st)
	}

	sent := f.sb.GitHub.Stats().Requests
	in := branchInput(f, t, "b3", "main")
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	breakerOpenError(t, err, breaker.GitHubWrite, time.Minute)
	if op := f.op(t, in.OperationID); op.State != capstan.OutcomeAbsent || op.AttemptCount != 0 {
		t.Errorf("ledger row = %s after %d attempts, want ABSENT (claim released) and never marked running", op.State, op.AttemptCount)
	}
	_, err = f.env.ExecuteActivity(f.acts.Deliver, contract.DeliverInput{Tenant: "d", TaskID: "T", OperationID: "d:T:deliver:github:acme/app#1",
		Comment: &contract.CommentTarget{Repo: "acme/app", Number: 1}, Text: "done"})
	breakerOpenError(t, err, breaker.GitHubWrite, time.Minute)
	if got := f.sb.GitHub.Stats().Requests; got != sent {
		t.Errorf("GitHub handled %d requests while github/write was open, want none", got-sent)
	}
	if fired := f.sb.GitHub.Faults()[0].Fired; fired != 2 {
		t.Errorf("the 503 rule fired %d times, want the 2 writes before the breaker opened", fired)
	}

	// A read goes through github/read, which is closed.
	_, err = f.env.ExecuteActivity(f.acts.ExecuteTool, contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1",
		OperationID: "d:T:t1:github_get_file:1", ToolCallID: "call_read", Tool: githubtools.NameGetFile,
		Arguments: f.args(t, `{"repo":"acme/app","path":"README.md"}`)})
	if err != nil {
		t.Fatalf("a read while github/write is open: %v", err)
	}
	if got := f.sb.GitHub.Stats().Requests; got != sent+1 {
		t.Errorf("the read sent %d requests, want 1", got-sent)
	}
}

// When the open period ends one probe goes out; when GitHub has recovered
// it succeeds, the breaker closes, and the operation whose claim was
// released is claimed afresh and acts once.
func TestExecuteToolProbesOnceAfterTheOpenPeriod(t *testing.T) {
	t.Parallel()
	set, opt := withBreakers(t, 300*time.Millisecond)
	f := newFixture(t, opt)
	if err := f.sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "git/create-ref", Kind: sandbox.FaultFail, Status: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"b1", "b2"} {
		_, _ = f.env.ExecuteActivity(f.acts.ExecuteTool, branchInput(f, t, b, "main"))
	}
	in := branchInput(f, t, "b3", "main")
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	wait := breakerOpenError(t, err, breaker.GitHubWrite, 300*time.Millisecond)

	f.sb.GitHub.ClearFaults() // GitHub is back
	<-time.After(wait)        // the delay the error asked Temporal to wait
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatalf("the probe after the open period: %v", err)
	}
	var res contract.ExecuteToolResult
	if err := v.Get(&res); err != nil || res.State != capstan.OutcomeSucceeded || res.Replayed {
		t.Fatalf("probe result = %+v, %v; want SUCCEEDED, sent", res, err)
	}
	if st := set.State(breaker.GitHubWrite); st != breaker.StateClosed {
		t.Errorf("after a successful probe github/write is %s, want closed", st)
	}
	if n := f.sb.GitHub.Stats().BranchesCreated; n != 1 {
		t.Errorf("branches created = %d, want 1", n)
	}
}

// A definite refusal shows GitHub is up: refusals never open the breaker.
func TestExecuteToolRefusalsDoNotTripTheBreaker(t *testing.T) {
	t.Parallel()
	set, opt := withBreakers(t, time.Minute)
	f := newFixture(t, opt)
	for _, b := range []string{"r1", "r2", "r3", "r4"} {
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, branchInput(f, t, b, "no-such-branch"))
		if err != nil {
			t.Fatalf("create %s from a missing branch: %v, want a refusal the model is told of", b, err)
		}
		var res contract.ExecuteToolResult
		if err := v.Get(&res); err != nil || res.State != capstan.OutcomeFailed {
			t.Fatalf("create %s from a missing branch = %+v, %v; want FAILED", b, res, err)
		}
	}
	if st := set.State(breaker.GitHubWrite); st != breaker.StateClosed {
		t.Errorf("after 4 refusals github/write is %s, want closed", st)
	}
}

// While a Slack post's breaker is open nothing is posted and the delivery's
// claim is released.
func TestDeliverSendsNothingWhileSlackBreakerIsOpen(t *testing.T) {
	t.Parallel()
	set, opt := withBreakers(t, time.Minute)
	f := newFixture(t, opt)
	if err := f.sb.Slack.AddFault(sandbox.FaultRule{Endpoint: "chat.postMessage", Kind: sandbox.FaultFail, Status: http.StatusBadGateway}); err != nil {
		t.Fatal(err)
	}
	deliver := func(n int) error {
		_, err := f.env.ExecuteActivity(f.acts.Deliver, contract.DeliverInput{Tenant: "d", TaskID: "T",
			OperationID: fmt.Sprintf("d:T%d:deliver:slack:#c", n), Channel: "#c", Text: "done"})
		return err
	}
	for n := range 2 {
		if appErr := appError(t, deliver(n)); appErr.Type() != contract.ErrTypeOperationUnknown {
			t.Fatalf("delivery %d under a 502: %v, want %s", n, appErr, contract.ErrTypeOperationUnknown)
		}
	}
	if st := set.State(breaker.SlackPost); st != breaker.StateOpen {
		t.Fatalf("slack/post is %s after 2 failed posts, want open", st)
	}
	breakerOpenError(t, deliver(2), breaker.SlackPost, time.Minute)
	if fired := f.sb.Slack.Faults()[0].Fired; fired != 2 {
		t.Errorf("Slack received %d posts, want the 2 before the breaker opened", fired)
	}
	if op := f.op(t, "d:T2:deliver:slack:#c"); op.State != capstan.OutcomeAbsent || op.AttemptCount != 0 {
		t.Errorf("ledger row = %s after %d attempts, want ABSENT and never running", op.State, op.AttemptCount)
	}
}

// A provider answering 503 opens model/<provider>; then an attempt sends
// nothing and ends breaker_open with the time left, for the turn guard to
// wait out. Rejections (4xx) before that count as answers.
func TestModelTurnSendsNothingWhileTheProviderBreakerIsOpen(t *testing.T) {
	t.Parallel()
	set, opt := withBreakers(t, time.Minute)
	f := newFixture(t, opt)
	var requests atomic.Int64
	status := atomic.Int64{}
	status.Store(http.StatusBadRequest)
	f.sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"error":{"message":"no","type":"server_error"}}`))
		return true
	})
	attempt := func(n int) error {
		in := contract.ModelTurnInput{TaskID: "T", TurnID: fmt.Sprintf("T/t%d", n), AttemptID: fmt.Sprintf("T/t%d/a1", n), Model: "sandbox:demo",
			Seed: []model.Message{{Role: model.RoleUser, Content: "go"}}}
		_, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
		return err
	}
	for n := 1; n <= 3; n++ {
		if r, _ := contract.AttemptReportOf(attempt(n)); r.Outcome != model.OutcomeRejected {
			t.Fatalf("attempt %d under a 400 = %+v, want rejected", n, r)
		}
	}
	if st := set.State(breaker.Model("openai")); st != breaker.StateClosed {
		t.Fatalf("after 3 rejections model/openai is %s, want closed", st)
	}
	status.Store(http.StatusServiceUnavailable)
	for n := 4; n <= 5; n++ {
		if r, _ := contract.AttemptReportOf(attempt(n)); r.Outcome != model.OutcomeOverloaded {
			t.Fatalf("attempt %d under a 503 = %+v, want overloaded", n, r)
		}
	}
	err := attempt(6)
	r, ok := contract.AttemptReportOf(err)
	if !ok || r.Outcome != model.OutcomeBreakerOpen || r.Phase != model.PhaseNotSent || r.Breaker != "model/openai" ||
		r.RetryAfterMS <= 0 || r.RetryAfterMS > time.Minute.Milliseconds() || r.AttemptID != "T/t6/a1" {
		t.Fatalf("attempt under an open breaker: %+v (%v), want breaker_open, NOT_SENT, model/openai (the sandbox alias's provider), the time left", r, err)
	}
	if appError(t, err).Type() != contract.ErrTypeModelAttempt || !appError(t, err).NonRetryable() {
		t.Errorf("err = %v, want a non-retryable %s: the turn guard decides", err, contract.ErrTypeModelAttempt)
	}
	if n := requests.Load(); n != 5 {
		t.Errorf("the provider received %d requests, want the 5 before the breaker opened", n)
	}
}

// The rule of docs/design.md §7: transport failures, 5xx, 429 and timeouts
// count against a dependency; a 4xx shows it is up; a cancellation or a
// call that never left proves nothing.
func TestBreakerHealthOfErrors(t *testing.T) {
	t.Parallel()
	ghAnswer := func(status int) error {
		return &github.ErrorResponse{Response: &http.Response{StatusCode: status, Request: &http.Request{Method: "POST", URL: &url.URL{}}}, Message: "x"}
	}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"success", nil, breaker.Success},
		{"404 refusal", tool.WithVerdict(ghAnswer(404), tool.VerdictFailed), breaker.Success},
		{"409 changed since read", fmt.Errorf("put: %w: %w", tool.ErrChangedSinceRead, ghAnswer(409)), breaker.Success},
		{"503", tool.WithVerdict(ghAnswer(503), tool.VerdictUnknown), breaker.Failure},
		{"429 rate limit", &tool.RetryAfterError{Wait: time.Minute, Err: ghAnswer(429)}, breaker.Failure},
		{"connection refused", fmt.Errorf("get: %w", dial), breaker.Failure},
		{"TLS refused", &tls.CertificateVerificationError{Err: errors.New("bad cert")}, breaker.Failure},
		{"reset after sending", errors.New("read tcp: connection reset by peer"), breaker.Failure},
		{"timeout", fmt.Errorf("post: %w", context.DeadlineExceeded), breaker.Failure},
		{"cancelled", fmt.Errorf("post: %w", context.Canceled), breaker.Ignored},
		{"cancelled, marked", tool.WithVerdict(context.Canceled, tool.VerdictCancelled), breaker.Ignored},
		{"invalid arguments", fmt.Errorf("x: %w", tool.ErrInvalidArguments), breaker.Ignored},
		{"refused by the tool", fmt.Errorf("x: %w", tool.ErrRefused), breaker.Ignored},
	} {
		if got := activities.ToolHealth(tc.err); got != tc.want {
			t.Errorf("tool %s: %s, want %s", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		err  error
		want breaker.Outcome
	}{
		{"posted", nil, breaker.Success},
		{"channel_not_found", slack.SlackErrorResponse{Err: "channel_not_found"}, breaker.Success},
		{"internal_error", slack.SlackErrorResponse{Err: "internal_error"}, breaker.Failure},
		{"ratelimited", &slack.RateLimitedError{RetryAfter: time.Second}, breaker.Failure},
		{"HTTP 503", slack.StatusCodeError{Code: 503, Status: "503 Service Unavailable"}, breaker.Failure},
		{"HTTP 429", slack.StatusCodeError{Code: 429, Status: "429 Too Many Requests"}, breaker.Failure},
		{"HTTP 404", slack.StatusCodeError{Code: 404, Status: "404 Not Found"}, breaker.Success},
		{"connection refused", dial, breaker.Failure},
		{"cancelled", context.Canceled, breaker.Ignored},
	} {
		if got := activities.SlackHealth(tc.err); got != tc.want {
			t.Errorf("slack %s: %s, want %s", tc.name, got, tc.want)
		}
	}
	for o, want := range map[model.Outcome]breaker.Outcome{
		model.OutcomeCompleted: breaker.Success, model.OutcomeRejected: breaker.Success, model.OutcomeInvalid: breaker.Success,
		model.OutcomeOverflow: breaker.Success, model.OutcomeNotSent: breaker.Failure, model.OutcomeOverloaded: breaker.Failure,
		model.OutcomeCutIdle: breaker.Failure, model.OutcomeCutTotal: breaker.Failure, model.OutcomeUnknown: breaker.Failure,
		model.OutcomeWorkerLost: breaker.Ignored, model.OutcomeCancelled: breaker.Ignored, model.OutcomeBreakerOpen: breaker.Ignored,
	} {
		if got := activities.ModelHealth(o); got != want {
			t.Errorf("model %s: %s, want %s", o, got, want)
		}
	}
}
