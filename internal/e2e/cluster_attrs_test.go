package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workerapp"
	"github.com/capstanhq/capstan/internal/workflows"
)

// startCapstanCluster starts a cluster (testenv.StartCluster) whose
// namespace has capstan's search attributes before any worker of the test
// starts, as the package's dev server has them (TestMain), and returns once
// every service uses them.
//
// Registered, an attribute is not yet usable everywhere: each service reads
// the namespace's attribute mapping from its own namespace cache, refreshed
// every system.namespaceCacheRefreshInterval (2 s). On the cluster a task
// started at once after a worker registered them had its first workflow
// task fail in history with BadSearchAttributes ("Namespace default has no
// mapping defined for search attribute CapstanRepo"); the server retried it
// and the task completed, but its history holds the failure. So this waits,
// by a probe, until a workflow that sets every one of capstan's attributes
// runs with no failed workflow task.
func startCapstanCluster(t *testing.T, opts testenv.ClusterOptions) *testenv.Cluster {
	t.Helper()
	c := testenv.StartCluster(t, opts)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	if err := workerapp.EnsureSearchAttributes(ctx, cl, c.Namespace, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("attribute-probe-%d", time.Now().UnixNano())
	w := worker.New(cl, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(attributeProbe, workflow.RegisterOptions{Name: "CapstanAttributeProbe"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", queue, i)
		run, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "CapstanAttributeProbe")
		if err == nil {
			err = run.Get(ctx, nil)
		}
		if err == nil && failedWorkflowTasks(t, cl, id) == 0 {
			t.Logf("capstan's search attributes usable on every service %s after their registration (%d probes)",
				time.Since(began).Round(10*time.Millisecond), i+1)
			return c
		}
		if ctx.Err() != nil {
			t.Fatalf("capstan's search attributes were not usable within 2 minutes of their registration: %v", err)
		}
	}
}

// attributeProbe sets every one of capstan's search attributes, as a task
// does, and ends.
func attributeProbe(ctx workflow.Context) error {
	var set []sdktemporal.SearchAttributeUpdate
	for _, key := range workflows.SearchAttributes {
		switch k := key.(type) {
		case sdktemporal.SearchAttributeKeyString:
			set = append(set, k.ValueSet("probe"))
		case sdktemporal.SearchAttributeKeyKeyword:
			set = append(set, k.ValueSet("probe"))
		case sdktemporal.SearchAttributeKeyKeywordList:
			set = append(set, k.ValueSet([]string{"probe"}))
		case sdktemporal.SearchAttributeKeyBool:
			set = append(set, k.ValueSet(false))
		case sdktemporal.SearchAttributeKeyInt64:
			set = append(set, k.ValueSet(0))
		case sdktemporal.SearchAttributeKeyFloat64:
			set = append(set, k.ValueSet(0))
		case sdktemporal.SearchAttributeKeyTime:
			set = append(set, k.ValueSet(workflow.Now(ctx)))
		}
	}
	return workflow.UpsertTypedSearchAttributes(ctx, set...)
}

// failedWorkflowTasks counts the failed workflow tasks in a workflow's
// history.
func failedWorkflowTasks(t *testing.T, c client.Client, workflowID string) int {
	t.Helper()
	n := 0
	it := c.GetWorkflowHistory(context.Background(), workflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", workflowID, err)
		}
		if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_FAILED {
			n++
		}
	}
	return n
}
