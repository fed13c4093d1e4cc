//go:build !capstan_rolling_v2

package workflows

import "go.temporal.io/sdk/workflow"

// probeBuild does nothing in every build capstan ships. The test-only build
// tag capstan_rolling_v2 (buildprobe_v2.go) replaces it with a workflow
// change that is deliberately not behind GetVersion, which is how
// TestLongRollingDeploy makes its second build's workflow code differ.
func (t *task) probeBuild(workflow.Context) error { return nil }
