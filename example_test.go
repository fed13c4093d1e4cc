package capstan_test

import (
	"fmt"

	"github.com/capstanhq/capstan"
)

// An outcome read from an older release's ledger row means what it meant
// then, spelled as today; and only some outcomes are knowledge of the
// effect: a task never ends with one of the others unlisted.
func ExampleParseOutcome() {
	for _, s := range []string{"succeeded", "AMBIGUOUS", "needs_human"} {
		o, err := capstan.ParseOutcome(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s → %s, known: %t\n", s, o, o.Known())
	}
	// Output:
	// succeeded → succeeded, known: true
	// AMBIGUOUS → unknown, known: false
	// needs_human → needs_human, known: false
}

// A reconciler's verdict settles an unknown outcome, or hands it to a
// person.
func ExampleVerdict_Outcome() {
	for _, v := range []capstan.Verdict{capstan.VerdictFound, capstan.VerdictAbsent, capstan.VerdictIndeterminate, capstan.VerdictNotYet} {
		fmt.Printf("%s: final %t, outcome %s\n", v, v.Final(), v.Outcome())
	}
	// Output:
	// found: final true, outcome succeeded
	// absent: final true, outcome absent
	// indeterminate: final true, outcome needs_human
	// not_yet: final false, outcome unknown
}
