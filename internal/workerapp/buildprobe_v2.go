//go:build capstan_rolling_v2

package workerapp

import (
	"context"
	"os"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/workflows"
)

// registerBuildExtras registers workflows.ActivityBuildProbe, which only
// the second build of TestLongRollingDeploy (`-tags capstan_rolling_v2`)
// has: it answers with the worker's CAPSTAN_BUILD_ID.
func registerBuildExtras(w worker.Registry) {
	w.RegisterActivityWithOptions(func(context.Context, workflows.BuildProbeInput) (workflows.BuildProbeResult, error) {
		return workflows.BuildProbeResult{Build: os.Getenv("CAPSTAN_BUILD_ID")}, nil
	}, activity.RegisterOptions{Name: workflows.ActivityBuildProbe})
}
