package capstan_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/capstanhq/capstan"
)

// Each outcome has one spelling, lower snake case, and no two share one.
func TestEveryOutcomeHasOneSpelling(t *testing.T) {
	t.Parallel()
	want := []string{"declared", "claimed", "not_sent", "running", "succeeded", "failed", "absent",
		"unknown", "reconciling", "needs_human", "cancelled", "awaiting_approval", "denied"}
	var got []string
	for _, o := range capstan.Outcomes() {
		got = append(got, o.String())
		if p, err := capstan.ParseOutcome(o.String()); err != nil || p != o {
			t.Errorf("ParseOutcome(%q) = %q, %v", o, p, err)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Outcomes() = %v, want %v", got, want)
	}
}

// What older releases wrote — the ledger's states in its rows and in
// activity results, the delivery states in task results and in the
// checkpoints of recorded histories — reads as the outcome it meant.
func TestOldSpellingsReadAsTheOutcomeTheyMeant(t *testing.T) {
	t.Parallel()
	for old, want := range map[string]capstan.Outcome{
		"DECLARED": capstan.OutcomeDeclared, "CLAIMED": capstan.OutcomeClaimed, "RUNNING": capstan.OutcomeRunning,
		"SUCCEEDED": capstan.OutcomeSucceeded, "FAILED": capstan.OutcomeFailed, "UNKNOWN": capstan.OutcomeUnknown,
		"ABSENT": capstan.OutcomeAbsent, "NEEDS_HUMAN": capstan.OutcomeNeedsHuman,
		"PENDING": capstan.OutcomeDeclared, "SENDING": capstan.OutcomeRunning, "ACKED": capstan.OutcomeSucceeded,
		"AMBIGUOUS": capstan.OutcomeUnknown, "RECONCILING": capstan.OutcomeReconciling,
		"RETRY_SCHEDULED": capstan.OutcomeAbsent, "DEAD_LETTER": capstan.OutcomeFailed,
	} {
		if got, err := capstan.ParseOutcome(old); err != nil || got != want {
			t.Errorf("ParseOutcome(%q) = %q, %v; want %q", old, got, err, want)
		}
		var rec struct {
			State capstan.Outcome `json:"state"`
		}
		if err := json.Unmarshal([]byte(`{"state":"`+old+`"}`), &rec); err != nil || rec.State != want {
			t.Errorf("JSON %q decodes as %q, %v; want %q", old, rec.State, err, want)
		}
		if !slices.Contains(want.OldSpellings(), old) {
			t.Errorf("%s.OldSpellings() = %v, missing %q", want, want.OldSpellings(), old)
		}
		b, _ := json.Marshal(struct {
			State capstan.Outcome `json:"state"`
		}{want})
		if string(b) != `{"state":"`+want.String()+`"}` {
			t.Errorf("%s encodes as %s: only today's spelling is written", want, b)
		}
	}
}

// A word nobody wrote is an error to ParseOutcome, but decodes as itself in
// JSON (a payload must not fail on a newer worker's word) and is never
// known; the empty string is the zero outcome.
func TestStrangeOutcomes(t *testing.T) {
	t.Parallel()
	if _, err := capstan.ParseOutcome("EXPLODED"); err == nil {
		t.Error("ParseOutcome accepted a word no release wrote")
	}
	var o capstan.Outcome
	if err := json.Unmarshal([]byte(`"exploded"`), &o); err != nil || o != "exploded" || o.Known() {
		t.Errorf(`"exploded" decodes as %q (known %t), %v; want itself, not known`, o, o.Known(), err)
	}
	if o, err := capstan.ParseOutcome(""); err != nil || o != "" {
		t.Errorf(`ParseOutcome("") = %q, %v`, o, err)
	}
}

// Known is the one test of "is what happened settled": a task never ends
// with an effect that is not known unlisted, whatever word it is in.
func TestKnownOutcomes(t *testing.T) {
	t.Parallel()
	known := map[capstan.Outcome]bool{
		capstan.OutcomeDeclared: true, capstan.OutcomeClaimed: true, capstan.OutcomeNotSent: true,
		capstan.OutcomeSucceeded: true, capstan.OutcomeFailed: true, capstan.OutcomeAbsent: true,
		// Nothing is sent while an operation awaits approval, nor after it
		// was denied.
		capstan.OutcomeAwaitingApproval: true, capstan.OutcomeDenied: true,
	}
	for _, o := range capstan.Outcomes() {
		if o.Known() != known[o] {
			t.Errorf("%s.Known() = %t, want %t", o, o.Known(), known[o])
		}
	}
}

// The final verdicts settle an effect's outcome; not_yet leaves it unknown.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v       capstan.Verdict
		final   bool
		outcome capstan.Outcome
	}{
		{capstan.VerdictFound, true, capstan.OutcomeSucceeded},
		{capstan.VerdictAbsent, true, capstan.OutcomeAbsent},
		{capstan.VerdictIndeterminate, true, capstan.OutcomeNeedsHuman},
		{capstan.VerdictNotYet, false, capstan.OutcomeUnknown},
	} {
		if tc.v.Final() != tc.final || tc.v.Outcome() != tc.outcome {
			t.Errorf("%s: final %t, outcome %s; want %t, %s", tc.v, tc.v.Final(), tc.v.Outcome(), tc.final, tc.outcome)
		}
	}
	// In recorded histories (ReconcileResult.Verdict, Resolution.Verdict).
	for v, s := range map[capstan.Verdict]string{capstan.VerdictFound: "found", capstan.VerdictAbsent: "absent",
		capstan.VerdictNotYet: "not_yet", capstan.VerdictIndeterminate: "indeterminate"} {
		if v.String() != s {
			t.Errorf("verdict %q, want %q", v, s)
		}
	}
}
