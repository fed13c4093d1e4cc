package main

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
)

// The per-task watchdog flags go into the task's input, and nothing else
// does: the starter's environment is not the worker's, and the limits a
// task leaves unset come from the worker that runs it (workflows,
// settleLimits).
func TestRunFlagsSetTheTasksModelLimits(t *testing.T) {
	t.Parallel()
	a := &app{cfg: config.FromEnv(func(k string) string {
		return map[string]string{"CAPSTAN_MODEL_MAX_DURATION": "5m"}[k]
	})}
	f := runFlags{prompt: "p", base: "main", tenant: "default", maxTurns: 3, humanTimeout: config.DefaultHumanTimeout,
		idleTimeout: 45 * time.Second}
	in, err := a.taskInput(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := (model.Limits{Idle: 45 * time.Second}); in.ModelLimits != want {
		t.Errorf("limits = %+v, want %+v: the flag's idle timeout alone", in.ModelLimits, want)
	}
	f.maxDuration = 90 * time.Second
	if in, err = a.taskInput(f); err != nil || in.ModelLimits != (model.Limits{Idle: 45 * time.Second, Total: 90 * time.Second}) {
		t.Errorf("--max-duration 90s: %+v, %v", in.ModelLimits, err)
	}
	f.idleTimeout = 2 * time.Minute
	if _, err := a.taskInput(f); err == nil {
		t.Error("an idle timeout longer than the attempt's total limit was accepted")
	}
}
