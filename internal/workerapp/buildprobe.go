//go:build !capstan_rolling_v2

package workerapp

import "go.temporal.io/sdk/worker"

// registerBuildExtras registers nothing in every build capstan ships; the
// test-only build tag capstan_rolling_v2 (buildprobe_v2.go) registers the
// activity TestLongRollingDeploy's second build has and its first lacks.
func registerBuildExtras(worker.Registry) {}
