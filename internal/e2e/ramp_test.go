package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// rampTasks is how many tasks start while half of new tasks go to v2: with
// each routed by its id's hash, all of them landing on one build has odds
// of 2 in 2^rampTasks.
const rampTasks = 16

// TestLongReadmeRolloutSequence runs the documented rollout (docs/configuration.md,
// "Deploying a new version") as written, with the pinned Temporal CLI: every `temporal
// worker deployment` line of its block, the deployment's name aside. v1 is
// current; v2's worker starts beside it; the ramp lines send 10 % and then
// 50 % of new tasks to v2, and tasks started then run on both builds; the
// set-current line sends every new task to v2; v1 drains and says so.
func TestLongReadmeRolloutSequence(t *testing.T) {
	requireLong(t)
	steps := readmeRollout(t)
	cli, err := testenv.TemporalCLI()
	if err != nil {
		t.Fatal(err)
	}
	sb := startSandbox(t)
	deployment := fmt.Sprintf("e2e-ramp-%d", time.Now().UnixNano())
	env := endpointEnv(t, deployment, sb)
	startWorker(t, asBuild(env, deployment, "v1"))
	setCurrent(t, deployment, "v1")
	startWorker(t, asBuild(env, deployment, "v2"))

	run := func(step rolloutStep) string {
		t.Helper()
		args := step.args(deployment)
		r := runToExit(t, cli, time.Minute, env, args...)
		if r.code != 0 {
			t.Fatalf("rollout: temporal %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r.stdout + r.stderr
	}
	// Step 1's describe of v2 succeeds once v2's worker has polled, which
	// no event announces.
	describeV2 := steps.find(t, "describe-version", "v2")
	retryFor(t, "rollout step 1: describe v2", 2*time.Minute, time.Second, func() error {
		if r := runToExit(t, cli, time.Minute, env, describeV2.args(deployment)...); r.code != 0 {
			return fmt.Errorf("exit %d: %s", r.code, r.stderr)
		}
		return nil
	})

	run(steps.find(t, "set-ramping-version", "10"))
	run(steps.find(t, "set-ramping-version", "50"))
	builds := map[string]int{}
	ids := make([]string, rampTasks)
	for i := range ids {
		ids[i] = startPlainTask(t, env, fmt.Sprintf("ramp-%d", i))
	}
	for _, id := range ids {
		if res := waitLong(t, id); res.Status != workflows.StatusCompleted {
			t.Errorf("task %s ended %s (%s): %s", id, res.Status, res.FailureCode, res.Message)
		}
		build, _ := taskBuild(t, env, id)
		builds[build]++
	}
	if builds[deployment+"/v1"]+builds[deployment+"/v2"] != rampTasks || builds[deployment+"/v1"] == 0 || builds[deployment+"/v2"] == 0 {
		t.Errorf("with 50 %% ramped to v2, %d tasks ran on %v; want some on each build", rampTasks, builds)
	}
	t.Logf("ramped 50 %%: %d tasks on v1, %d on v2", builds[deployment+"/v1"], builds[deployment+"/v2"])

	run(steps.find(t, "set-current-version", "v2"))
	for i := range 3 {
		id := startPlainTask(t, env, fmt.Sprintf("ramp-current-%d", i))
		if res := waitLong(t, id); res.Status != workflows.StatusCompleted {
			t.Errorf("task %s ended %s (%s): %s", id, res.Status, res.FailureCode, res.Message)
		}
		if b, pinned := taskBuild(t, env, id); b != deployment+"/v2" || !pinned {
			t.Errorf("after set-current-version v2, task %s ran on %s (pinned %t); want %s/v2, pinned", id, b, pinned, deployment)
		}
	}

	waitDrained(t, deployment, "v1")
	if out := run(steps.find(t, "describe-version", "v1")); !strings.Contains(strings.ToLower(out), "drained") {
		t.Errorf("rollout step 3: describe-version of drained v1 does not say drained:\n%s", out)
	}
}

// rolloutStep is one `temporal worker deployment` line of the README's
// rollout block, as words.
type rolloutStep []string

// args is the step's words after `temporal`, for deployment instead of the
// README's `capstan`.
func (s rolloutStep) args(deployment string) []string {
	out := make([]string, 0, len(s)-1)
	for i, w := range s[1:] {
		if i > 0 && s[i] == "--deployment-name" {
			w = deployment
		}
		out = append(out, w)
	}
	return out
}

type rolloutSteps []rolloutStep

// find is the step whose subcommand is sub and which holds the word with.
func (ss rolloutSteps) find(t *testing.T, sub, with string) rolloutStep {
	t.Helper()
	for _, s := range ss {
		if len(s) > 3 && s[3] == sub && strings.Contains(" "+strings.Join(s, " ")+" ", " "+with+" ") {
			return s
		}
	}
	t.Fatalf("the README's rollout has no `temporal worker deployment %s … %s …` line (%d lines read)", sub, with, len(ss))
	return nil
}

// readmeRollout reads the `temporal worker deployment` lines of the code
// block that follows "Rolling out build" in the README, comments cut.
func readmeRollout(t *testing.T) rolloutSteps {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps rolloutSteps
	found, fences := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() && fences < 2 {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Rolling out build"):
			found = true
		case found && strings.HasPrefix(line, "```"):
			fences++
		case found && fences == 1:
			line, _, _ = strings.Cut(line, "#")
			if w := strings.Fields(line); len(w) > 3 && w[0] == "temporal" && w[1] == "worker" && w[2] == "deployment" {
				steps = append(steps, rolloutStep(w))
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(steps) == 0 {
		t.Fatal("docs/configuration.md: no `temporal worker deployment` line in the block after \"Rolling out build\"")
	}
	return steps
}

// startPlainTask starts the pull-request demo task and returns its id.
func startPlainTask(t *testing.T, env []string, name string) string {
	t.Helper()
	id := fmt.Sprintf("e2e-%s-%d", name, time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", prPrompt, "--repo", branchRepo, "--model", "openai:demo", "--id", id); r.code != 0 {
		t.Fatalf("start %s: exit %d: %s", id, r.code, r.stderr)
	}
	return id
}

// taskBuild is the build `starter status --json` reports for a task, and
// whether the task is pinned to it.
func taskBuild(t *testing.T, env []string, id string) (build string, pinned bool) {
	t.Helper()
	r := runStarter(t, env, "status", id, "--json")
	var st struct {
		Build  string `json:"build"`
		Pinned bool   `json:"pinned"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Build == "" {
		t.Fatalf("starter status %s --json shows no build (%v):\n%s%s", id, err, r.stdout, r.stderr)
	}
	return st.Build, st.Pinned
}
