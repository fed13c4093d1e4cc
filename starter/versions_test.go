package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	deploymentpb "go.temporal.io/api/deployment/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
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
		// An override decides over the worker's behaviour, as it does for
		// the server and for the search attributes versions and list read.
		{desc(&workflowpb.WorkflowExecutionVersioningInfo{Behavior: enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE,
			DeploymentVersion: &deploymentpb.WorkerDeploymentVersion{DeploymentName: "capstan", BuildId: "v1"},
			VersioningOverride: &workflowpb.VersioningOverride{Override: &workflowpb.VersioningOverride_Pinned{Pinned: &workflowpb.VersioningOverride_PinnedOverride{
				Version: &deploymentpb.WorkerDeploymentVersion{DeploymentName: "capstan", BuildId: "v3"}}}}}),
			"build: capstan/v3 (pinned: it ends on this build's workers)"},
		{desc(&workflowpb.WorkflowExecutionVersioningInfo{Behavior: enumspb.VERSIONING_BEHAVIOR_PINNED,
			DeploymentVersion:  &deploymentpb.WorkerDeploymentVersion{DeploymentName: "capstan", BuildId: "v2"},
			VersioningOverride: &workflowpb.VersioningOverride{Override: &workflowpb.VersioningOverride_AutoUpgrade{AutoUpgrade: true}}}),
			"build: capstan/v2 (auto-upgrade)"},
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

// keywords is a list entry's search attributes holding the Keyword values
// kv, encoded as the server encodes them.
func keywords(t *testing.T, kv map[string]string) map[string]*commonpb.Payload {
	t.Helper()
	sa := map[string]*commonpb.Payload{}
	for k, v := range kv {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		if err != nil {
			t.Fatal(err)
		}
		sa[k] = p
	}
	return sa
}

// The server spells a version "DEPLOYMENT:BUILD" (recent servers) or
// "DEPLOYMENT.BUILD" (older ones); both read as the label `starter status`
// prints, whatever the build id holds, and no version reads as
// unversioned.
func TestBuildOfVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v, want string
		ok      bool
	}{
		{"capstan:v2", "capstan/v2", true},
		{"capstan.v2", "capstan/v2", true},
		{"capstan:v2.1", "capstan/v2.1", true},
		{"capstan.v2:rc", "capstan/v2:rc", true},
		{"capstan:sha256:ab.cd", "capstan/sha256:ab.cd", true},
		{"", unversioned, true},
		{"__unversioned__", unversioned, true},
		{"capstan", "", false},
		{":v2", "", false},
		{"capstan:", "", false},
	} {
		if got, ok := buildOfVersion(tc.v); got != tc.want || ok != tc.ok {
			t.Errorf("buildOfVersion(%q) = %q, %t; want %q, %t", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// A list entry tells a run's build and pinned-ness when it holds both
// versioning attributes, and tells it is unversioned without them only
// when the server keeps them; otherwise the run must be described.
func TestListedBuild(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		sa         map[string]string
		keeps      bool
		build      string
		pinned, ok bool
	}{
		{"pinned, recent spelling", map[string]string{attrDeploymentVersion: "capstan:v2", attrVersioningBehavior: "Pinned"}, true, "capstan/v2", true, true},
		{"pinned, older spelling", map[string]string{attrDeploymentVersion: "capstan.v2", attrVersioningBehavior: "Pinned"}, false, "capstan/v2", true, true},
		{"auto-upgrade", map[string]string{attrDeploymentVersion: "capstan:v3", attrVersioningBehavior: "AutoUpgrade"}, true, "capstan/v3", false, true},
		{"the enum's long name", map[string]string{attrDeploymentVersion: "capstan:v3", attrVersioningBehavior: "VERSIONING_BEHAVIOR_PINNED"}, true, "capstan/v3", true, true},
		{"absent, the server keeps it", map[string]string{"CapstanTenant": "acme"}, true, unversioned, false, true},
		{"absent, an older server", map[string]string{"CapstanTenant": "acme"}, false, unversioned, false, false},
		{"a version without its behavior", map[string]string{attrDeploymentVersion: "capstan:v2"}, true, "", false, false},
		{"an unknown behavior", map[string]string{attrDeploymentVersion: "capstan:v2", attrVersioningBehavior: "Sideways"}, true, "", false, false},
		{"not a version", map[string]string{attrDeploymentVersion: "capstan", attrVersioningBehavior: "Pinned"}, true, "", false, false},
		{"the server's unversioned", map[string]string{attrDeploymentVersion: "__unversioned__"}, false, unversioned, false, true},
	} {
		build, pinned, ok := listedBuild(keywords(t, tc.sa), tc.keeps)
		if ok != tc.ok || (ok && (build != tc.build || pinned != tc.pinned)) {
			t.Errorf("%s: listedBuild = %q, pinned %t, known %t; want %q, %t, %t", tc.name, build, pinned, ok, tc.build, tc.pinned, tc.ok)
		}
	}
}

// `starter list` shows the build from the attribute alone: its label,
// unversioned without it, the server's text when it is not a version.
func TestListedBuildLabel(t *testing.T) {
	t.Parallel()
	for sa, want := range map[string]string{"capstan:v2": "capstan/v2", "capstan.v2": "capstan/v2", "odd": "odd"} {
		if got := listedBuildLabel(keywords(t, map[string]string{attrDeploymentVersion: sa})); got != want {
			t.Errorf("listedBuildLabel(%q) = %q, want %q", sa, got, want)
		}
	}
	if got := listedBuildLabel(nil); got != unversioned {
		t.Errorf("listedBuildLabel without the attribute = %q, want %q", got, unversioned)
	}
}
