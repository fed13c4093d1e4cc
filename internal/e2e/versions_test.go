package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/workflows"
)

// TestVersionsReportsUnpinnedTasks: a task of an unversioned worker, held
// waiting for approval, is listed under the unversioned build by `starter
// versions --json`; it blocks the retirement of a change it has not read
// yet and not of the changes it read as it started: a task started since
// all-changes-v13 read that one marker, which covers every change (the
// older ones through all-changes-v7), so it blocks none — not even
// resolve-once-found-read-back, which an older task reads only when a
// resolve update comes; and a task `starter run` stamps with
// workflows.CurrentLogic records not even that marker (LogicUnmarked), nor
// the TemporalChangeVersion update the SDK adds to one, yet blocks none.
// The markers it records are approvals-bound's and search-flags', where
// its operation first waits for approval (changes after LogicUnmarked, read
// on their own markers by stamped tasks too), each once, and the updates
// that come with them name those changes alone. `starter status` says it is unversioned.
func TestVersionsReportsUnpinnedTasks(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-versions", sb)
	startWorker(t, env)
	taskID, _ := startApprovalTask(t, env, "versions")
	t.Cleanup(func() { runStarter(t, env, "cancel", taskID) })

	rep := versionsJSON(t, env)
	unversioned := false
	for _, b := range rep.Builds {
		unversioned = unversioned || (b.Build == "unversioned" && !b.Pinned && b.Open >= 1)
	}
	if !unversioned {
		t.Errorf("no unversioned build with an open task: %+v", rep.Builds)
	}
	want := map[string]bool{"resolve-once-found-read-back": false, "approvals": false, "all-changes-v7": false, "worker-limits": false,
		"scheduled-task-ids": false, "all-changes-v13": false, "approvals-bound": false, "search-flags": false}
	for _, ch := range rep.Changes {
		w, ok := want[ch.ID]
		if !ok {
			continue
		}
		delete(want, ch.ID)
		if got := slices.Contains(ch.Tasks, taskID); got != w {
			t.Errorf("change %s: the held task listed as may take its old branch = %t, want %t (%v)", ch.ID, got, w, ch.Tasks)
		}
		if w && ch.Retire {
			t.Errorf("change %s: can retire with the held task open", ch.ID)
		}
	}
	if len(want) != 0 {
		t.Errorf("starter versions does not report changes %v", want)
	}
	// The changes a stamped task still reads on their own markers, where
	// its operation first waits for approval: each once.
	ownMarkers := map[string]int{"approvals-bound": 0, "search-flags": 0}
	for _, ev := range fetchHistory(t, workflows.WorkflowID(taskID)).GetEvents() {
		if m := ev.GetMarkerRecordedEventAttributes(); m.GetMarkerName() == "Version" {
			id := strings.Trim(string(m.GetDetails()["change-id"].GetPayloads()[0].GetData()), `"`)
			if _, ok := ownMarkers[id]; !ok {
				t.Errorf("event %d: GetVersion marker %q in the history of a task started unmarked; want only %v", ev.GetEventId(), id, ownMarkers)
			}
			ownMarkers[id]++
		}
		if v, ok := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()["TemporalChangeVersion"]; ok &&
			!regexp.MustCompile(`^\[("(approvals-bound|search-flags)-1",?)+\]$`).Match(v.GetData()) {
			t.Errorf("event %d: a TemporalChangeVersion update %s in the history of a task started unmarked; want only approvals-bound-1 and search-flags-1", ev.GetEventId(), v.GetData())
		}
	}
	for id, n := range ownMarkers {
		if n != 1 {
			t.Errorf("%d GetVersion markers %s in the held task's history, want 1 (as its operation began to wait)", n, id)
		}
	}
	assertUnversioned := runStarter(t, env, "status", taskID)
	if !json.Valid([]byte(runStarter(t, env, "status", taskID, "--json").stdout)) || !slices.Contains(strings.Split(assertUnversioned.stdout, "\n"), "build: unversioned") {
		t.Errorf("starter status does not say the task is unversioned:\n%s", assertUnversioned.stdout)
	}
	assertListed(t, env, taskID, "default", "unversioned")
}

// TestVersionsReportsPinnedTasks: a task of tenant acme-<n> started on a
// versioned worker made current, held waiting for approval, is listed by
// `starter versions --json` under its build "DEPLOYMENT/BUILD", pinned, the
// label `starter status` prints, as the only open task of it, and in no
// change's tasks (a pinned task replays only its own build's code);
// `starter list --json` and its table show its tenant and build.
func TestVersionsReportsPinnedTasks(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	stamp := time.Now().UnixNano()
	deployment := fmt.Sprintf("e2e-versions-pinned-%d", stamp)
	tenant := fmt.Sprintf("acme-%d", stamp)
	env := endpointEnv(t, deployment, sb)
	startWorker(t, asBuild(env, deployment, "b1"))
	setCurrent(t, deployment, "b1")
	taskID, _ := startApprovalTask(t, env, "versions-pinned", "--tenant", tenant)
	t.Cleanup(func() { runStarter(t, env, "cancel", taskID) })
	build := deployment + "/b1"
	assertBuild(t, env, taskID, build)

	rep := versionsJSON(t, env)
	var row *versionsBuild
	for i, b := range rep.Builds {
		if b.Build == build {
			row = &rep.Builds[i]
		}
	}
	if row == nil || !row.Pinned || row.Open != 1 {
		t.Errorf("starter versions --json: build %s not reported pinned with 1 open task: %+v", build, rep.Builds)
	}
	for _, ch := range rep.Changes {
		if slices.Contains(ch.Tasks, taskID) {
			t.Errorf("change %s: the pinned task listed as may take its old branch", ch.ID)
		}
	}
	assertListed(t, env, taskID, tenant, build)
}

// versionsBuild is a build row of `starter versions --json`.
type versionsBuild struct {
	Build  string `json:"build"`
	Pinned bool   `json:"pinned"`
	Open   int    `json:"open_tasks"`
}

// versionsReport is `starter versions --json`, as the tests read it.
type versionsReport struct {
	Builds  []versionsBuild `json:"builds"`
	Changes []struct {
		ID         string   `json:"change_id"`
		MayNeedOld int      `json:"open_tasks_that_may_take_the_old_branch"`
		Tasks      []string `json:"tasks"`
		Retire     bool     `json:"old_branch_can_retire"`
	} `json:"changes"`
}

// versionsJSON runs `starter versions --json` and decodes its report; its
// stdout must be the JSON alone.
func versionsJSON(t *testing.T, env []string) versionsReport {
	t.Helper()
	r := runStarter(t, env, "versions", "--json")
	if r.code != 0 {
		t.Fatalf("starter versions: exit %d: %s", r.code, r.stderr)
	}
	return decodeVersions(t, r.stdout)
}

// decodeVersions decodes the stdout of `starter versions --json`.
func decodeVersions(t *testing.T, stdout string) versionsReport {
	t.Helper()
	var rep versionsReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("starter versions --json: %v\n%s", err, stdout)
	}
	return rep
}

// assertListed checks that `starter list --awaiting-approval --json` lists
// taskID, held for approval, with its tenant and build, and that the
// table shows both on its row. Only the tasks held for approval are listed:
// the 50 most recent of all would leave it out when other tests run many.
func assertListed(t *testing.T, env []string, taskID, tenant, build string) {
	t.Helper()
	r := runStarter(t, env, "list", "--awaiting-approval", "--json")
	if r.code != 0 {
		t.Fatalf("starter list --awaiting-approval --json: exit %d: %s", r.code, r.stderr)
	}
	var rows []struct {
		TaskID string `json:"task_id"`
		Tenant string `json:"tenant"`
		Build  string `json:"build"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("starter list --json: %v\n%s", err, r.stdout)
	}
	found := false
	for _, row := range rows {
		if row.TaskID == taskID {
			found = true
			if row.Tenant != tenant || row.Build != build {
				t.Errorf("starter list --json: task %s with tenant %q and build %q, want %q and %q", taskID, row.Tenant, row.Build, tenant, build)
			}
		}
	}
	if !found {
		t.Errorf("starter list --json does not list task %s:\n%s", taskID, r.stdout)
	}
	table := runStarter(t, env, "list", "--awaiting-approval")
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(taskID) + `\s+\S+\s+` + regexp.QuoteMeta(tenant) + `\s+` + regexp.QuoteMeta(build) + `\s`).MatchString(table.stdout) {
		t.Errorf("starter list --awaiting-approval does not show task %s with tenant %s and build %s:\n%s", taskID, tenant, build, table.stdout)
	}
}
