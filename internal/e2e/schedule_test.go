package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	"github.com/capstanhq/capstan/internal/workflows"
)

// scheduleState is `starter schedule describe --json`.
type scheduleState struct {
	Paused         bool     `json:"paused"`
	Runs           int      `json:"runs"`
	SkippedOverlap int      `json:"skipped_overlap"`
	Running        []string `json:"running_tasks"`
	Overlap        string   `json:"overlap"`
	Recent         []struct {
		TaskID      string    `json:"task_id"`
		WorkflowID  string    `json:"workflow_id"`
		ScheduledAt time.Time `json:"scheduled_at"`
		StartedAt   time.Time `json:"started_at"`
	} `json:"recent_runs"`
}

// waitSchedule polls `starter schedule describe` until ok holds: a
// schedule's runs are its own workflow's doing, with no event a client can
// wait on.
func waitSchedule(t *testing.T, env []string, id, what string, ok func(scheduleState) bool) scheduleState {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := runStarter(t, env, "schedule", "describe", id, "--json")
		var s scheduleState
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &s) == nil && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %s: never %s; last describe: exit %d %s %s", id, what, r.code, r.stdout, r.stderr)
		}
		time.Sleep(500 * time.Millisecond) // polling the schedule's state, not waiting out an event
	}
}

// ledgerOps are the operation ids the test's ledger holds for task.
func ledgerOps(t *testing.T, env []string, task string) []string {
	t.Helper()
	var path string
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "CAPSTAN_LEDGER_DSN=sqlite://"); ok {
			path = p
		}
	}
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ops, err := st.ListByTask(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	return ids
}

// TestScheduleStartsTasksSkipsOverlapPausesAndDeletes: a schedule made by
// `starter schedule create --every 5s` starts a task on its times; while
// that task waits for an approval, the runs that come due are skipped
// (overlap skip, counted in the schedule's info); once it ends, the next
// due run starts a second task, with a task id of its own — the schedule
// id and its scheduled time, no ":" — and so its own operation ids and
// ledger rows. A paused schedule starts nothing; unpaused it starts again;
// deleted, it is gone. A bad cron expression is one sentence, exit 2, and
// creates nothing.
func TestScheduleStartsTasksSkipsOverlapPausesAndDeletes(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-schedule", sb)
	startWorker(t, env)
	sid := fmt.Sprintf("e2e-sched-%d", time.Now().UnixNano())
	task := []string{"--prompt", prPrompt, "--repo", branchRepo, "--model", "openai:demo", "--require-approval", "github_create_pull_request"}

	bad := runStarter(t, env, append([]string{"schedule", "create", "--id", sid, "--cron", "61 * * * *"}, task...)...)
	if bad.code != 2 || !strings.Contains(bad.stderr, `--cron "61 * * * *"`) || strings.Count(strings.TrimSpace(bad.stderr), "\n") != 0 {
		t.Fatalf("bad cron: exit %d, stderr %q; want exit 2 and one line about --cron", bad.code, bad.stderr)
	}
	t.Logf("bad cron: %s", bad.stderr)
	if d := runStarter(t, env, "schedule", "describe", sid); d.code != 2 || !strings.Contains(d.stderr, "no schedule "+sid) {
		t.Fatalf("after the bad cron: describe exit %d, stderr %q; want no schedule", d.code, d.stderr)
	}

	if r := runStarter(t, env, append([]string{"schedule", "create", "--id", sid, "--every", "5s"}, task...)...); r.code != 0 {
		t.Fatalf("schedule create: exit %d, stderr %s", r.code, r.stderr)
	}
	t.Cleanup(func() { runStarter(t, env, "schedule", "delete", sid) })
	idForm := regexp.MustCompile(`^` + regexp.QuoteMeta(sid) + `-\d{8}T\d{6}Z$`)

	s := waitSchedule(t, env, sid, "running a task", func(s scheduleState) bool { return len(s.Running) == 1 })
	taskA := s.Running[0]
	if !idForm.MatchString(taskA) || s.Overlap != "skip" {
		t.Fatalf("first run's task id %q (overlap %s); want %s-YYYYMMDDTHHMMSSZ, no ':', overlap skip", taskA, s.Overlap, sid)
	}
	opA := waitAwaitingApproval(t, env, taskA)
	s = waitSchedule(t, env, sid, "skipping a run while the first waits", func(s scheduleState) bool { return s.SkippedOverlap >= 1 })
	if s.Runs != 1 {
		t.Fatalf("while %s waits for approval: %d runs started, want 1 (the others skipped)", taskA, s.Runs)
	}
	if r := runStarter(t, env, "approve", taskA, opA.OperationID, "--hash", opA.CallHash); r.code != 0 {
		t.Fatalf("approve %s: exit %d, stderr %s", taskA, r.code, r.stderr)
	}
	resA := waitOutcome(t, env, taskA, 90*time.Second)

	s = waitSchedule(t, env, sid, "starting a second task", func(s scheduleState) bool {
		return s.Runs >= 2 && len(s.Running) == 1 && s.Running[0] != taskA
	})
	taskB := s.Running[0]
	if r := runStarter(t, env, "schedule", "pause", sid, "--note", "e2e"); r.code != 0 || !strings.Contains(r.stdout, "paused schedule "+sid) {
		t.Fatalf("pause: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	opB := waitAwaitingApproval(t, env, taskB)
	if r := runStarter(t, env, "approve", taskB, opB.OperationID, "--hash", opB.CallHash); r.code != 0 {
		t.Fatalf("approve %s: exit %d, stderr %s", taskB, r.code, r.stderr)
	}
	resB := waitOutcome(t, env, taskB, 90*time.Second)

	for _, res := range []workflows.TaskResult{resA, resB} {
		if res.Status != workflows.StatusCompleted || !idForm.MatchString(res.TaskID) || res.WorkflowID != workflows.WorkflowID(res.TaskID) {
			t.Errorf("scheduled task %s (workflow %s): %s %s; want completed under its own id", res.TaskID, res.WorkflowID, res.Status, res.Message)
		}
		for _, op := range res.Operations {
			if !strings.Contains(op.OperationID, ":"+res.TaskID+":") {
				t.Errorf("operation %s of task %s does not carry its task id", op.OperationID, res.TaskID)
			}
		}
	}
	rowsA, rowsB := ledgerOps(t, env, taskA), ledgerOps(t, env, taskB)
	if taskA == taskB || len(rowsA) == 0 || len(rowsB) == 0 || slices.ContainsFunc(rowsA, func(id string) bool { return slices.Contains(rowsB, id) }) {
		t.Errorf("tasks %s and %s: ledger rows %q and %q; want two tasks with rows of their own", taskA, taskB, rowsA, rowsB)
	}

	// On time: each run was scheduled on a 5 s boundary, and its task id
	// names that time.
	for _, r := range s.Recent {
		if r.ScheduledAt.UnixNano()%int64(5*time.Second) != 0 || r.TaskID != workflows.ScheduledTaskID(sid, r.ScheduledAt) {
			t.Errorf("run %s scheduled at %s: want a 5 s boundary named by the task id", r.TaskID, r.ScheduledAt)
		}
		t.Logf("run %s started %s after its scheduled time", r.TaskID, r.StartedAt.Sub(r.ScheduledAt))
	}

	// Paused: two more intervals pass and nothing starts.
	quiet := time.Now().Add(11 * time.Second)
	for time.Now().Before(quiet) {
		if s = waitSchedule(t, env, sid, "described", func(scheduleState) bool { return true }); !s.Paused || s.Runs != 2 {
			t.Fatalf("paused schedule: paused %v, %d runs; want paused with 2", s.Paused, s.Runs)
		}
		time.Sleep(time.Second) // watching for a run that must not come
	}
	if r := runStarter(t, env, "schedule", "list"); r.code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(sid)+`\s+every 5s\s+paused`).MatchString(r.stdout) {
		t.Errorf("schedule list: exit %d, stdout %q; want %s, every 5s, paused", r.code, r.stdout, sid)
	}
	t.Logf("paused:\n%s", runStarter(t, env, "schedule", "describe", sid).stdout)
	if r := runStarter(t, env, "schedule", "pause", sid, "--unpause"); r.code != 0 {
		t.Fatalf("unpause: exit %d, stderr %s", r.code, r.stderr)
	}
	s = waitSchedule(t, env, sid, "starting a task once unpaused", func(s scheduleState) bool { return !s.Paused && s.Runs >= 3 })
	if r := runStarter(t, env, "schedule", "delete", sid); r.code != 0 {
		t.Fatalf("delete: exit %d, stderr %s", r.code, r.stderr)
	}
	if d := runStarter(t, env, "schedule", "describe", sid); d.code != 2 || !strings.Contains(d.stderr, "no schedule "+sid) {
		t.Errorf("after delete: describe exit %d, stderr %q; want no schedule", d.code, d.stderr)
	}
	for _, id := range s.Running {
		runStarter(t, env, "cancel", id)
	}
}
