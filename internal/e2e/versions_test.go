package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/workflows"
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
// `starter status` says it is unversioned.
func TestVersionsReportsUnpinnedTasks(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-versions", sb)
	startWorker(t, env)
	taskID, _ := startApprovalTask(t, env, "versions")
	t.Cleanup(func() { runStarter(t, env, "cancel", taskID) })

	r := runStarter(t, env, "versions", "--json")
	if r.code != 0 {
		t.Fatalf("starter versions: exit %d: %s", r.code, r.stderr)
	}
	var rep struct {
		Builds []struct {
			Build  string `json:"build"`
			Pinned bool   `json:"pinned"`
			Open   int    `json:"open_tasks"`
		} `json:"builds"`
		Changes []struct {
			ID     string   `json:"change_id"`
			Tasks  []string `json:"tasks"`
			Retire bool     `json:"old_branch_can_retire"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("starter versions --json: %v\n%s", err, r.stdout)
	}
	unversioned := false
	for _, b := range rep.Builds {
		unversioned = unversioned || (b.Build == "unversioned" && !b.Pinned && b.Open >= 1)
	}
	if !unversioned {
		t.Errorf("no unversioned build with an open task: %+v", rep.Builds)
	}
	want := map[string]bool{"resolve-once-found-read-back": false, "approvals": false, "all-changes-v7": false, "worker-limits": false,
		"scheduled-task-ids": false, "all-changes-v13": false}
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
	for _, ev := range fetchHistory(t, workflows.WorkflowID(taskID)).GetEvents() {
		if m := ev.GetMarkerRecordedEventAttributes(); m.GetMarkerName() == "Version" {
			t.Errorf("event %d: a GetVersion marker in the history of a task started unmarked", ev.GetEventId())
		}
		if _, ok := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()["TemporalChangeVersion"]; ok {
			t.Errorf("event %d: a TemporalChangeVersion update in the history of a task started unmarked", ev.GetEventId())
		}
	}
	assertUnversioned := runStarter(t, env, "status", taskID)
	if !json.Valid([]byte(runStarter(t, env, "status", taskID, "--json").stdout)) || !slices.Contains(strings.Split(assertUnversioned.stdout, "\n"), "build: unversioned") {
		t.Errorf("starter status does not say the task is unversioned:\n%s", assertUnversioned.stdout)
	}
}
