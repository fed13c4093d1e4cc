package main

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/workflows"
)

// The per-task watchdog flags override the environment's limits and go
// into the task's input, where both the activity and the workflow read them.
func TestRunFlagsSetTheTasksModelLimits(t *testing.T) {
	a := &app{cfg: config.FromEnv(func(k string) string {
		return map[string]string{"CAPSTAN_MODEL_MAX_DURATION": "5m"}[k]
	})}
	f := runFlags{prompt: "p", base: "main", tenant: "default", maxTurns: 3, humanTimeout: workflows.DefaultHumanTimeout,
		idleTimeout: 45 * time.Second}
	in, err := a.taskInput(f)
	if err != nil {
		t.Fatal(err)
	}
	got := in.ModelLimits
	if got.Idle != 45*time.Second || got.FirstEvent != 45*time.Second || got.Total != 5*time.Minute || got.HeartbeatTimeout != 30*time.Second {
		t.Errorf("limits = %+v, want idle and first event 45s from the flag, total 5m from the environment, heartbeat 30s", got)
	}
	f.maxDuration = 90 * time.Second
	if in, err = a.taskInput(f); err != nil || in.ModelLimits.Total != 90*time.Second {
		t.Errorf("--max-duration 90s: %+v, %v", in.ModelLimits, err)
	}
	f.idleTimeout = 2 * time.Minute
	if _, err := a.taskInput(f); err == nil {
		t.Error("an idle timeout longer than the attempt's total limit was accepted")
	}
}
