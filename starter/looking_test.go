package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/contract"
)

// starter follow shows, for each pending Reconcile, what its reconciler
// looks for and until when, from the activity's heartbeat details.
func TestFollowShowsWhatTheReconcilerLooksFor(t *testing.T) {
	beat, err := converter.GetDefaultDataConverter().ToPayloads(contract.ReconcileProgress{Asked: 1,
		LookingFor: "a pull request of acme/app from capstan/x into main", AbsentBy: time.Date(2026, 12, 2, 14, 2, 10, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	pending := []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: contract.ActivityReconcile}, HeartbeatDetails: beat},
		{ActivityType: &commonpb.ActivityType{Name: contract.ActivityReconcile}}, // no beat yet
		{ActivityType: &commonpb.ActivityType{Name: "ModelTurn"}, HeartbeatDetails: beat},
	}
	lines := reconcilersLooking(pending)
	want := "reconciler: looking for a pull request of acme/app from capstan/x into main; absent if not seen by 14:02:10 UTC (asked 1 times)"
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("lines = %q, want [%q]", lines, want)
	}
	v := newLiveView(&bytes.Buffer{}, "t1", time.Now)
	v.looking = lines
	if region := v.liveRegion(); !slices.ContainsFunc(region, func(l string) bool { return strings.HasPrefix(l, "reconciler: looking for") }) {
		t.Errorf("live region %q does not show what the reconciler looks for", region)
	}
}
