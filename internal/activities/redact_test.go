package activities_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/model/openai"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/internal/redact"
	"github.com/capstanhq/capstan/tool"
)

// activitySecret is held by the worker: in a tool's endpoint (a webhook's
// path) and in OPENAI_BASE_URL.
const activitySecret = "hook-secret-4c1b9e77"

// redactingEnv runs acts behind the boundary a worker installs, masking
// the secrets of r.
func redactingEnv(acts *activities.Activities, r *redact.Redactor) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{activities.RedactingInterceptor(r)}})
	env.RegisterActivity(acts)
	return env
}

// noSecret fails the test when what holds the secret, in any form.
func noSecret(t *testing.T, what, text string) {
	t.Helper()
	if strings.Contains(text, activitySecret) || strings.Contains(text, url.QueryEscape(activitySecret)) {
		t.Errorf("%s holds the secret: %s", what, text)
	} else if !strings.Contains(text, redact.Mask) {
		t.Errorf("%s = %q, want the secret's place masked", what, text)
	}
}

// A tool whose endpoint holds a secret loses its answer: the error quoting
// its URL is masked in the ledger's error column, in the failure Temporal
// records and in the reason the workflow builds from it, and the failure
// keeps its type, so the workflow still reconciles it.
func TestNoSecretInAToolsFailureOrTheLedger(t *testing.T) {
	t.Parallel()
	notes := &notesService{keepThenDrop: true}
	srv := httptest.NewServer(notes)
	t.Cleanup(srv.Close)
	registry := tool.NewRegistry(notesTool{url: srv.URL + "/hooks/" + activitySecret})
	r := redact.New(activitySecret)
	f := newFixture(t, func(d *activities.Deps) {
		d.Tools = registry
		d.Reconcilers = reconcilers.NewSet(registry)
		d.Redactor = r
	})
	env := redactingEnv(f.acts, r)
	in := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_1",
		OperationID: "d:T:t1:" + notesPost + ":1", Tool: notesPost, Arguments: f.args(t, `{"text":"remember the milk"}`)}
	_, err := env.ExecuteActivity(f.acts.ExecuteTool, in)
	expectAppError(t, "ExecuteTool with the answer dropped", err, contract.ErrTypeOperationUnknown)
	noSecret(t, "the activity's failure", err.Error())
	// What the workflow records as the operation's reason (workflows.settle).
	noSecret(t, "the operation's reason", contract.Describe(err))
	op, gerr := f.ledger.Get(context.Background(), in.OperationID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	noSecret(t, "the ledger's error column", op.Error)
}

// OPENAI_BASE_URL holds a key (a gateway's, in its path) and nothing
// listens there: the attempt's failure, the report in its details (which
// the workflow's turn guard journals) and the line the worker logs are
// masked. The API key is
// one of a real key's length: the provider masks its own key in what it
// says, and a one-letter key masked a letter of the URL's secret, which
// hid it from the redactor.
func TestNoSecretInAModelAttemptsFailure(t *testing.T) {
	const modelKey = "sk-model-test-key-91c0"
	t.Parallel()
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r := redact.New(activitySecret)
	var logs bytes.Buffer
	acts, err := activities.New(activities.Deps{Ledger: f.ledger, Tools: f.acts.Tools, Identity: "w", Redactor: r,
		// As workerapp.New wraps the worker's logger.
		Logger: slog.New(r.Handler(slog.NewTextHandler(&logs, nil))),
		Providers: map[string]model.Provider{"sandbox": openai.New(openai.Config{
			BaseURL: "http://" + addr + "/" + activitySecret + "/v1", APIKey: modelKey, ConnectTimeout: 5 * time.Second})}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = redactingEnv(acts, r).ExecuteActivity(acts.ModelTurn, contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1",
		Model: "sandbox:hello", Seed: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	report, ok := contract.AttemptReportOf(err)
	if !ok || report.Outcome != model.OutcomeNotSent {
		t.Fatalf("report = %+v (%v), want not_sent", report, err)
	}
	noSecret(t, "the attempt's failure", err.Error())
	noSecret(t, "the attempt's report", fmt.Sprintf("%+v", report))
	noSecret(t, "the worker's log", logs.String())
}
