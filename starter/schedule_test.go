package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/workflows"
)

// schedule create's flags are checked before anything is created: each
// refusal is one usage error; a good set makes a schedule whose action
// starts AgentTask as task-<id>, overlap skip by default.
func TestScheduleCreateChecksItsFlags(t *testing.T) {
	t.Parallel()
	a := &app{cfg: config.FromEnv(func(string) string { return "" })}
	f := runFlags{prompt: "p", base: "main", tenant: "default", maxTurns: 3, humanTimeout: config.DefaultHumanTimeout, id: "nightly"}
	for _, tc := range []struct {
		name    string
		mod     func(*runFlags)
		cron    string
		every   time.Duration
		overlap string
		want    string
	}{
		{"no id", func(f *runFlags) { f.id = "" }, "@daily", 0, "skip", "--id is required"},
		{"no spec", nil, "", 0, "skip", "needs --cron EXPR or --every D"},
		{"short every", nil, "", 10 * time.Millisecond, "skip", "--every 10ms is too short"},
		{"bad overlap", nil, "@daily", 0, "sometimes", `--overlap "sometimes"`},
		{"long id", func(f *runFlags) { f.id = strings.Repeat("x", 84) }, "@daily", 0, "skip", "too long for a schedule"},
		{"scheduled form", func(f *runFlags) { f.id = "x-20261202T160500Z" }, "@daily", 0, "skip", "scheduled run's task id"},
		{"no prompt", func(f *runFlags) { f.prompt = "" }, "@daily", 0, "skip", "--prompt is required"},
	} {
		g := f
		if tc.mod != nil {
			tc.mod(&g)
		}
		_, err := a.scheduleOptions(g, tc.cron, tc.every, tc.overlap)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a usage error saying %q", tc.name, err, tc.want)
		}
	}
	opts, err := a.scheduleOptions(f, "0 9 * * 1-5", 5*time.Second, "skip")
	if err != nil {
		t.Fatal(err)
	}
	if opts.ID != "nightly" || opts.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_SKIP || len(opts.Spec.CronExpressions) != 1 ||
		len(opts.Spec.Intervals) != 1 || opts.Memo[memoScheduleSpec] != "cron 0 9 * * 1-5, every 5s" {
		t.Errorf("schedule options = %+v", opts)
	}
}

// inputDiff names the first argument that differs, with both values —
// never the prompt's.
func TestInputDiffNamesWhatDiffers(t *testing.T) {
	t.Parallel()
	was := workflows.AgentTaskInput{TaskID: "x", Prompt: "secret one", Repo: "a/b", Model: "openai:m", MaxTurns: 20}
	for _, tc := range []struct {
		mod  func(*workflows.AgentTaskInput)
		want string
	}{
		{func(in *workflows.AgentTaskInput) {}, ""},
		{func(in *workflows.AgentTaskInput) { in.Repo = "c/d" }, "--repo a/b, not c/d"},
		{func(in *workflows.AgentTaskInput) { in.Prompt = "secret two" }, "another --prompt"},
		{func(in *workflows.AgentTaskInput) { in.Repo = "" }, "--repo a/b, not none"},
		{func(in *workflows.AgentTaskInput) { in.MaxTurns = 7 }, "--max-turns 20, not 7"},
	} {
		now := was
		tc.mod(&now)
		if got := inputDiff(was, now); got != tc.want {
			t.Errorf("inputDiff = %q, want %q", got, tc.want)
		}
		if strings.Contains(inputDiff(was, now), "secret") {
			t.Error("the prompt was printed")
		}
	}
	if taskstart.InputHash(was) == taskstart.InputHash(workflows.AgentTaskInput{TaskID: "x", Prompt: "secret two", Repo: "a/b", Model: "openai:m", MaxTurns: 20}) {
		t.Error("two inputs have one hash")
	}
	// A task an older starter started (no logic stamp) is the same task to
	// this one, which stamps its own.
	stamped := was
	stamped.Logic = workflows.CurrentLogic
	if taskstart.InputHash(stamped) != taskstart.InputHash(was) || inputDiff(was, stamped) != "" {
		t.Errorf("the logic stamp changes the input's hash or diff (%q)", inputDiff(was, stamped))
	}
}
