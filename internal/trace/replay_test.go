package trace

import (
	"context"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/workflows"
)

// The worker's tracing interceptors change nothing a workflow decides:
// every recorded history of internal/workflows replays with them as
// without, and a replay exports no span (a replay is not a run).
func TestRecordedHistoriesReplayWithTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(newIDGenerator()))
	p := &Provider{tp: sdk, sdk: sdk}
	interceptors, err := p.WorkerInterceptors()
	if err != nil || len(interceptors) != 2 {
		t.Fatalf("WorkerInterceptors() = %v, %v", interceptors, err)
	}
	files, err := filepath.Glob(filepath.Join("..", "workflows", "testdata", "*.json"))
	if err != nil || len(files) < 5 {
		t.Fatalf("recorded histories: %d, %v", len(files), err)
	}
	for _, f := range files {
		r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{Interceptors: interceptors})
		if err != nil {
			t.Fatal(err)
		}
		r.RegisterWorkflow(workflows.AgentTask)
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
			t.Errorf("replay %s with tracing: %v", filepath.Base(f), err)
		}
	}
	_ = sdk.ForceFlush(context.Background())
	for _, s := range rec.Ended() {
		if s.Name() == "RunWorkflow:AgentTask" || s.Name() == "HandleUpdate:approve" || s.Name() == "HandleUpdate:deny" {
			t.Errorf("a replay exported span %s", s.Name())
		}
	}
	t.Logf("%d histories replayed with tracing; %d spans ended", len(files), len(rec.Ended()))
}
