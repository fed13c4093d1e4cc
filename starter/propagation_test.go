package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/internal/workflows"
)

// propagatingClient is a real client whose first refuse starts are
// refused the way a Temporal server on SQL visibility refuses them in the
// second or two after the namespace's search attributes were registered:
// an InvalidArgument in the server's own words (namespace.Namespace's
// "has no mapping defined for search attribute"). The dev server serves
// new attributes at once, so the refusal is made here; every other call,
// and every start after those, reaches the server.
type propagatingClient struct {
	client.Client
	ns     string
	refuse int

	mu    sync.Mutex
	tries int
}

func (p *propagatingClient) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	p.mu.Lock()
	p.tries++
	refused := p.tries <= p.refuse
	p.mu.Unlock()
	if refused {
		return nil, serviceerror.NewInvalidArgument(fmt.Sprintf("Namespace %s has no mapping defined for search attribute %s", p.ns, workflows.AttrStatus.GetName()))
	}
	return p.Client.ExecuteWorkflow(ctx, o, wf, args...)
}

func (p *propagatingClient) startTries() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tries
}

// A start refused while the namespace's attributes propagate is retried
// and makes exactly one task; one still refused past the bound is
// reported as what it is, not as attributes the namespace lacks; and a
// start the real server refuses because the namespace does lack them is
// reported at once, with no retry.
func TestStartRefusedWhileAttributesPropagate(t *testing.T) {
	ctx := context.Background()
	srv, err := testenv.StartDevServer(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	c := srv.Client()
	a := &app{cfg: config.FromEnv(func(string) string { return "" })}
	opts := client.Options{Namespace: "default"}
	input := func(id string) workflows.AgentTaskInput {
		return workflows.AgentTaskInput{TaskID: id, Tenant: config.DefaultTenant, Logic: workflows.CurrentLogic, Prompt: "say hello", Repo: "acme/payments", Model: "openai:demo"}
	}

	// Not registered: the real server's refusal, reported at once.
	lacking := &propagatingClient{Client: c, ns: "default"}
	began := time.Now()
	_, err = a.startTask(ctx, lacking, opts, "propagation", input("lacking-1"))
	if err == nil || !strings.Contains(err.Error(), "does not define the search attribute(s)") || lacking.startTries() != 1 {
		t.Fatalf("start on a namespace without capstan's attributes: %v after %d tries; want the attributes named after one", err, lacking.startTries())
	}
	if took := time.Since(began); took >= attributePropagationWait {
		t.Errorf("the refusal for missing attributes took %s: it waited as if they were propagating", took)
	}

	if err := workerapp.EnsureSearchAttributes(ctx, c, "default", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}

	// Registered, refused twice while they propagate: one task.
	p := &propagatingClient{Client: c, ns: "default", refuse: 2}
	st, err := a.startTask(ctx, p, opts, "propagation", input("propagating-1"))
	if err != nil {
		t.Fatalf("start refused twice while the attributes propagate: %v", err)
	}
	if p.startTries() != 3 || st.Attached {
		t.Errorf("started after %d tries (attached %v), want the third try to start the task", p.startTries(), st.Attached)
	}
	d, err := c.DescribeWorkflow(ctx, workflows.WorkflowID("propagating-1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if info := d.RawResponse.GetWorkflowExecutionInfo(); info.GetExecution().GetRunId() != st.RunID || info.GetFirstRunId() != st.RunID {
		t.Errorf("the task's run is %s (first run %s), want the one start %s", info.GetExecution().GetRunId(), info.GetFirstRunId(), st.RunID)
	}

	// Registered, refused past the bound: said as it is, nothing started.
	stuck := &propagatingClient{Client: c, ns: "default", refuse: 1 << 20}
	_, err = startWhileAttributesPropagate(ctx, c, "default", 300*time.Millisecond, func() (client.WorkflowRun, error) {
		return stuck.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "never", TaskQueue: "propagation"}, workflows.AgentTask, input("never"))
	})
	if !errors.Is(err, errAttributesNotServed) || strings.Contains(err.Error(), "does not define") || !strings.Contains(err.Error(), "defines the search attribute CapstanStatus") {
		t.Errorf("start refused past the bound: %v; want errAttributesNotServed saying the namespace defines CapstanStatus", err)
	}
	if stuck.startTries() < 2 {
		t.Errorf("refused past the bound after %d tries, want it retried", stuck.startTries())
	}
}
