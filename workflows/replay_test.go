package workflows_test

import (
	"path/filepath"
	"regexp"
	"testing"

	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/workflows"
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
