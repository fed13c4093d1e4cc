package workerapp

import (
	"fmt"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/config"
)

// deploymentOptions puts a worker under Temporal's Worker Versioning when
// its configuration names a deployment version: it polls as that version,
// and every workflow it registers is Pinned — a task runs to its end on
// workers of the build it started on, so a deploy never replays a running
// task's history against other workflow code. The zero Deployment is an
// unversioned worker, as before.
func deploymentOptions(d config.Deployment) worker.DeploymentOptions {
	if !d.Versioned() {
		return worker.DeploymentOptions{}
	}
	return worker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   worker.WorkerDeploymentVersion{DeploymentName: d.Name, BuildID: d.BuildID},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
	}
}

// versionNote is what the worker's "polling" line adds for a versioned
// worker.
func versionNote(d config.Deployment) string {
	if !d.Versioned() {
		return ""
	}
	return fmt.Sprintf(" as deployment %s build %s", d.Name, d.BuildID)
}
