package workflows

// HistoryVersion labels the released AgentTask logic that new recorded
// histories come from: `make record-history` writes
// testdata/<HistoryVersion>-<case>.json, and replay_test.go replays every
// file of every label against the current code.
//
// A recorded history is never rewritten: it is what a task started by that
// release did, and the current code must still replay it. When workflow
// logic changes (behind workflow.GetVersion, so the old histories keep
// replaying), bump this label ("v1" → "v2") in the same change and record
// the new histories under it; the files of the earlier labels stay.
const HistoryVersion = "v1"
