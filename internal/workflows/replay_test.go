package workflows_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/workflows"
)

// minRecordedHistories is how many histories testdata/ holds at least: the
// v1 cases (demo, idle retry, continue-as-new, cancelled, failed). Fewer
// means a history went missing, and with it the proof that its path still
// replays.
const minRecordedHistories = 5

// recordedName is the name of a recorded history:
// <workflows.HistoryVersion at recording>-<case>.json.
var recordedName = regexp.MustCompile(`^v[0-9]+-[a-z0-9-]+\.json$`)

// TestReplayRecordedHistories replays every history recorded in testdata/,
// from every released version of the workflow, against the current
// AgentTask. A change to shipped workflow logic that is not behind
// workflow.GetVersion fails here with a nondeterminism error. Histories are
// recorded with `make record-history` and never overwritten.
func TestReplayRecordedHistories(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < minRecordedHistories {
		t.Fatalf("%d recorded histories in testdata/, want at least %d: a recorded history was lost", len(files), minRecordedHistories)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if !recordedName.MatchString(filepath.Base(f)) {
				t.Errorf("%s is not named <version>-<case>.json (the current version is %q)", f, workflows.HistoryVersion)
			}
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(workflows.AgentTask)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

// TestReplayStampedStartsOfOlderWorkers: a task a starter stamped
// LogicUnmarked whose first step ran on an older worker — during a rolling
// deploy the starter may be newer than the worker that takes the task —
// replays on the markers that worker recorded (readLogic): the demo of v13
// (all-changes-v13), of v12 (all-changes-v7, the start's search
// attributes upserted) and of v7 (the first all-changes-v7), their start
// input stamped as the current starter stamps it.
func TestReplayStampedStartsOfOlderWorkers(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"v13-demo.json", "v12-demo.json", "v7-demo.json"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			payload := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()[0]
			var in map[string]any
			if err := json.Unmarshal(payload.GetData(), &in); err != nil {
				t.Fatal(err)
			}
			if _, ok := in["logic"]; ok {
				t.Fatalf("%s is stamped already", name)
			}
			in["logic"] = workflows.CurrentLogic
			if payload.Data, err = json.Marshal(in); err != nil {
				t.Fatal(err)
			}
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(workflows.AgentTask)
			if err := r.ReplayWorkflowHistory(nil, h); err != nil {
				t.Fatalf("replay %s stamped %d: %v", name, workflows.CurrentLogic, err)
			}
		})
	}
}
