package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	deploymentpb "go.temporal.io/api/deployment/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/config"
)

// A task is started with its tenant as fairness key, the tenant's weight
// from CAPSTAN_TENANT_WEIGHTS (0, the server's default, when unlisted) and
// --priority.
func TestTaskPriorityIsTenantWeightAndPriority(t *testing.T) {
	t.Parallel()
	a := &app{cfg: config.FromEnv(func(k string) string {
		return map[string]string{"CAPSTAN_TENANT_WEIGHTS": "acme=2, beta=0.5"}[k]
	})}
	if got, want := a.taskPriority("acme", 1), (temporal.Priority{PriorityKey: 1, FairnessKey: "acme", FairnessWeight: 2}); got != want {
		t.Errorf("acme: %+v, want %+v", got, want)
	}
	if got, want := a.taskPriority("other", 1), (temporal.Priority{PriorityKey: 1, FairnessKey: "other"}); got != want {
		t.Errorf("an unlisted tenant: %+v, want %+v", got, want)
	}
}

// --priority outside 1..5 is a usage error, nothing started.
func TestRunRefusesAPriorityOutOfRange(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"6", "-1"} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"run", "--prompt", "p", "--priority", p}, func(string) string { return "" }, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "--priority "+p+" is out of range") {
			t.Errorf("--priority %s: exit %d, stderr %q; want 2 and one sentence", p, code, errb.String())
		}
	}
}

// starter status names the build a task is pinned to, or says it is
// unversioned.
func TestBuildLine(t *testing.T) {
	t.Parallel()
	desc := func(vi *workflowpb.WorkflowExecutionVersioningInfo) *workflowservice.DescribeWorkflowExecutionResponse {
		return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{VersioningInfo: vi}}
	}
	pinned := desc(&workflowpb.WorkflowExecutionVersioningInfo{Behavior: enumspb.VERSIONING_BEHAVIOR_PINNED,
		DeploymentVersion: &deploymentpb.WorkerDeploymentVersion{DeploymentName: "capstan", BuildId: "v2"}})
	for _, tc := range []struct {
		d    *workflowservice.DescribeWorkflowExecutionResponse
		want string
	}{
		{pinned, "build: capstan/v2 (pinned: it ends on this build's workers)"},
		{desc(nil), "build: unversioned"},
	} {
		if got := buildLine(tc.d); got != tc.want {
			t.Errorf("buildLine = %q, want %q", got, tc.want)
		}
	}
}

// A change is in effect for a task by its own marker or by an umbrella's,
// through every umbrella that covers it; a task with none of those may
// take the change's old branch.
func TestVersionMarkersCoverThroughUmbrellas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		markers map[string]bool
		change  string
		want    bool
	}{
		{map[string]bool{"all-changes-v13": true}, "worker-limits", true},
		{map[string]bool{"all-changes-v13": true}, "approvals", true},
		{map[string]bool{"all-changes-v7": true}, "worker-limits", true},
		{map[string]bool{"all-changes-v7": true}, "approvals", false},
		{map[string]bool{"approvals": true}, "approvals", true},
		{map[string]bool{}, "resolve-once-found-read-back", false},
	} {
		if got := inEffect(tc.markers, tc.change); got != tc.want {
			t.Errorf("markers %v, change %s: in effect %t, want %t", tc.markers, tc.change, got, tc.want)
		}
	}
}
