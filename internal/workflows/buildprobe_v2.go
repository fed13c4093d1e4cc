//go:build capstan_rolling_v2

package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// This file is compiled only into the second build of TestLongRollingDeploy
// (`go build -tags capstan_rolling_v2`), never into a build capstan ships.

// ActivityBuildProbe is an activity only workers of the test's second
// build register (internal/workerapp's buildprobe_v2.go).
const ActivityBuildProbe = "CapstanBuildProbe"

// BuildProbeInput is ActivityBuildProbe's input.
type BuildProbeInput struct {
	TaskID string `json:"task_id"`
}

// BuildProbeResult is ActivityBuildProbe's result: the build that ran it.
type BuildProbeResult struct {
	Build string `json:"build"`
}

// probeBuild runs ActivityBuildProbe as a run's first step, before any
// turn. It is a workflow change deliberately NOT behind GetVersion: a task
// of an earlier build replayed on this code schedules the probe where its
// history holds a model turn, and fails with a nondeterminism error. Only
// Worker Versioning's pinning — a task stays on the build it started on —
// keeps that from happening, which is what the test shows.
func (t *task) probeBuild(ctx workflow.Context) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var out BuildProbeResult
	if err := workflow.ExecuteActivity(actx, ActivityBuildProbe, BuildProbeInput{TaskID: t.in.TaskID}).Get(ctx, &out); err != nil {
		return err
	}
	t.note(ctx, "build probe: ran on build %s", out.Build)
	return nil
}
