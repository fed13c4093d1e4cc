package activities_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// These tests run the activities the way a workflow schedules them, with a
// heartbeat timeout and a start-to-close timeout that the test environment
// enforces, as the server does.

// callOptions are the timeouts a test workflow gives its one activity.
type callOptions struct {
	HeartbeatTimeout    time.Duration
	StartToCloseTimeout time.Duration
}

func (o callOptions) of(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: o.StartToCloseTimeout,
		HeartbeatTimeout:    o.HeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
}

// executeToolWorkflow runs ExecuteTool once.
func executeToolWorkflow(ctx workflow.Context, o callOptions, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
	var a *activities.Activities
	var res contract.ExecuteToolResult
	err := workflow.ExecuteActivity(o.of(ctx), a.ExecuteTool, in).Get(ctx, &res)
	return res, err
}

// deliverWorkflow runs Deliver once.
func deliverWorkflow(ctx workflow.Context, o callOptions, in contract.DeliverInput) (contract.DeliverResult, error) {
	var a *activities.Activities
	var res contract.DeliverResult
	err := workflow.ExecuteActivity(o.of(ctx), a.Deliver, in).Get(ctx, &res)
	return res, err
}

func (f *fixture) workflowEnv() *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(f.acts)
	env.RegisterWorkflow(executeToolWorkflow)
	env.RegisterWorkflow(deliverWorkflow)
	env.SetTestTimeout(time.Minute)
	return env
}

// A tool or delivery call that takes longer than the heartbeat timeout
// survives it: the activity heartbeats on a ticker while the call runs,
// whatever the call does. The fake holds the call until the test has seen
// three heartbeats — which Temporal's batching spaces by 80 % of the
// timeout, so the call outlives the timeout — then serves it.
func TestOperationsHeartbeatWhileTheCallRuns(t *testing.T) {
	t.Parallel()
	const heartbeatTimeout = 2 * time.Second
	opts := callOptions{HeartbeatTimeout: heartbeatTimeout, StartToCloseTimeout: time.Minute}
	for _, tc := range []struct {
		name  string
		opID  string
		hold  func(f *fixture, fault func(http.ResponseWriter, *http.Request, http.Handler) bool)
		run   func(f *fixture, env *testsuite.TestWorkflowEnvironment) error
		count func(f *fixture) int64
	}{
		{
			name: "ExecuteTool", opID: "op-branch",
			hold: func(f *fixture, fault func(http.ResponseWriter, *http.Request, http.Handler) bool) {
				f.sb.GitHub.SetFault(fault)
			},
			run: func(f *fixture, env *testsuite.TestWorkflowEnvironment) error {
				env.ExecuteWorkflow(executeToolWorkflow, opts, contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1",
					OperationID: "op-branch", ToolCallID: "call_1", Tool: githubtools.NameCreateBranch,
					Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","from":"main"}`)})
				var res contract.ExecuteToolResult
				if err := env.GetWorkflowResult(&res); err != nil {
					return err
				}
				if res.State != capstan.OutcomeSucceeded {
					return fmt.Errorf("result %+v, want SUCCEEDED", res)
				}
				return nil
			},
			count: func(f *fixture) int64 { return f.sb.GitHub.Stats().BranchesCreated },
		},
		{
			name: "Deliver", opID: "op-deliver",
			hold: func(f *fixture, fault func(http.ResponseWriter, *http.Request, http.Handler) bool) {
				f.sb.Slack.SetFault(fault)
			},
			run: func(f *fixture, env *testsuite.TestWorkflowEnvironment) error {
				env.ExecuteWorkflow(deliverWorkflow, opts, contract.DeliverInput{Tenant: "d", TaskID: "T", OperationID: "op-deliver", Channel: "#c", Text: "done"})
				var res contract.DeliverResult
				return env.GetWorkflowResult(&res)
			},
			count: func(f *fixture) int64 { return f.sb.Slack.Stats().MessagesPosted },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			env := f.workflowEnv()
			beats := make(chan activities.OperationHeartbeat, 64)
			env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
				var hb activities.OperationHeartbeat
				if err := details.Get(&hb); err != nil {
					hb.Step = "undecodable: " + err.Error()
				}
				select {
				case beats <- hb:
				default:
				}
			})
			held := make(chan []activities.OperationHeartbeat, 1)
			var first atomic.Bool
			tc.hold(f, func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
				// The call is the first write; a read before it (a tool's
				// Prepare) is served.
				if r.Method == http.MethodGet || first.Swap(true) {
					return false
				}
				var seen []activities.OperationHeartbeat
				deadline := time.After(30 * time.Second)
				for len(seen) < 3 {
					select {
					case hb := <-beats:
						seen = append(seen, hb)
					case <-deadline:
						held <- seen
						w.WriteHeader(http.StatusServiceUnavailable)
						return true
					case <-r.Context().Done(): // the caller gave up: no beats kept it alive
						held <- seen
						return true
					}
				}
				// The claim's lease is the heartbeat timeout, and each beat
				// renewed it: it now ends later than it was claimed to.
				if op, err := f.ledger.Get(context.Background(), tc.opID); err != nil {
					t.Errorf("ledger row of %s: %v", tc.opID, err)
				} else if claimed := op.CreatedAt.Add(heartbeatTimeout); !op.LeaseExpiresAt.After(claimed) {
					t.Errorf("lease of %s ends %s, not after the %s it was claimed with: heartbeats did not renew it", tc.opID, op.LeaseExpiresAt, claimed)
				}
				held <- seen
				return false // now serve the call
			})
			if err := tc.run(f, env); err != nil {
				t.Fatalf("the held call failed: %v", err)
			}
			seen := <-held
			if len(seen) < 3 {
				t.Fatalf("heartbeats while the call was held = %+v, want at least 3", seen)
			}
			for _, hb := range seen {
				if hb.OperationID != tc.opID || hb.Step != "calling" {
					t.Errorf("heartbeat %+v, want operation %s at step calling", hb, tc.opID)
				}
			}
			if n := tc.count(f); n != 1 {
				t.Errorf("effects = %d, want 1", n)
			}
		})
	}
}

// A write that lands but whose answer comes only after the activity's
// deadline is read back and recorded anyway: the read-back and every
// ledger write after the call use a context the deadline cannot break.
// (The test environment reports the activity's end once its function has
// returned, so the ledger is settled when ExecuteWorkflow returns.)
func TestExecuteToolRecordsWhatHappenedAfterItsDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	env := f.workflowEnv()
	var puts atomic.Int32
	f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodPut {
			return false
		}
		puts.Add(1)
		next.ServeHTTP(&discard{header: http.Header{}}, r) // written…
		<-r.Context().Done()                               // …and answered only after the caller gave up
		return true
	})
	env.ExecuteWorkflow(executeToolWorkflow, callOptions{StartToCloseTimeout: time.Second}, putFileInput(f, t, "op-put", "hello"))
	if err := env.GetWorkflowError(); err != nil && !strings.Contains(err.Error(), "timeout") {
		t.Errorf("workflow error = %v, want none or the activity's timeout", err)
	}
	op := f.op(t, "op-put")
	if op.State != capstan.OutcomeSucceeded || op.ExternalID != gitBlobSHA("hello") {
		t.Errorf("ledger = %s %q (%s), want SUCCEEDED with the blob, found by reading back after the deadline", op.State, op.ExternalID, op.Error)
	}
	if n, written := puts.Load(), f.sb.GitHub.Stats().FilesWritten; n != 1 || written != 1 {
		t.Errorf("%d PUTs, %d files written; want 1 and 1", n, written)
	}
}

// An operation whose call ends within one heartbeat interval (a third of
// the heartbeat timeout) sends no heartbeat at all: the timeout counts from
// the attempt's start, so a beat as the activity starts would tell the
// server nothing it needs.
func TestQuickOperationsSendNoHeartbeat(t *testing.T) {
	t.Parallel()
	opts := callOptions{HeartbeatTimeout: time.Minute, StartToCloseTimeout: time.Minute}
	for _, tc := range []struct {
		name string
		opID string
		run  func(f *fixture, env *testsuite.TestWorkflowEnvironment)
	}{
		{
			name: "ExecuteTool", opID: "op-branch",
			run: func(f *fixture, env *testsuite.TestWorkflowEnvironment) {
				env.ExecuteWorkflow(executeToolWorkflow, opts, contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1",
					OperationID: "op-branch", ToolCallID: "call_1", Tool: githubtools.NameCreateBranch,
					Arguments: f.args(t, `{"repo":"acme/app","branch":"feat","from":"main"}`)})
			},
		},
		{
			name: "Deliver", opID: "op-deliver",
			run: func(f *fixture, env *testsuite.TestWorkflowEnvironment) {
				env.ExecuteWorkflow(deliverWorkflow, opts, contract.DeliverInput{Tenant: "d", TaskID: "T", OperationID: "op-deliver", Channel: "#c", Text: "done"})
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			env := f.workflowEnv()
			var beats atomic.Int32
			env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats.Add(1) })
			tc.run(f, env)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatalf("the operation failed: %v", err)
			}
			if op := f.op(t, tc.opID); op.State != capstan.OutcomeSucceeded || op.AttemptCount != 1 {
				t.Fatalf("ledger = %s after %d attempts, want SUCCEEDED after 1", op.State, op.AttemptCount)
			}
			if n := beats.Load(); n != 0 {
				t.Errorf("heartbeats = %d, want none for a call shorter than one interval", n)
			}
		})
	}
}
