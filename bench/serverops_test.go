package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// The dev server's persistence requests are summed by operation over their
// other labels, and a round's are the difference of two reads.
func TestReadServerOps(t *testing.T) {
	page := `# HELP persistence_requests persistence_requests counter
# TYPE persistence_requests counter
persistence_requests{namespace="default",operation="UpdateWorkflowExecution",service_name="history"} 30
persistence_requests{namespace="temporal_system",operation="UpdateWorkflowExecution",service_name="history"} 4
persistence_requests{namespace="default",operation="CreateTasks",service_name="matching"} 12
# TYPE persistence_latency_count counter
persistence_latency_count{namespace="default",operation="CreateTasks"} 99
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)

	got, err := readServerOps(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["UpdateWorkflowExecution"] != 34 || got["CreateTasks"] != 12 {
		t.Fatalf("read %v; want UpdateWorkflowExecution 34, CreateTasks 12", got)
	}
	d := got.since(serverOps{"UpdateWorkflowExecution": 30, "CreateTasks": 12})
	if len(d) != 1 || d["UpdateWorkflowExecution"] != 4 {
		t.Fatalf("since = %v; want UpdateWorkflowExecution 4 alone", d)
	}
	if total := got.total(); total != 46 {
		t.Fatalf("total = %v, want 46", total)
	}

	rows := serverOpsRows(serverOps{"A": 3, "B": 0.2, "C": 1}, serverOps{"A": 3, "B": 0.1, "D": 5}, 0.5)
	if want := []string{"D", "A", "C"}; !slices.Equal(rows, want) {
		t.Fatalf("rows = %v, want %v (most asked first, B under the floor)", rows, want)
	}
}

func TestReadServerOpsRefusesAnErrorPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	if _, err := readServerOps(context.Background(), srv.URL); err == nil {
		t.Fatal("a 503 was read as metrics")
	}
}
