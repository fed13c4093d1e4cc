package contract

import (
	"fmt"
	"time"
)

// ReconcileProgress is the Reconcile activity's heartbeat detail: what the
// reconciler is looking for, until when, and what it has seen. `starter
// follow` shows it while the activity is pending (Line).
type ReconcileProgress struct {
	Asked int    `json:"asked"`
	Last  string `json:"last,omitempty"` // the last observation, or why the last question failed
	// Waiting says why the question being asked is waiting, as its lookup
	// told (a rate limit's Retry-After); empty when it is not.
	Waiting string `json:"waiting,omitempty"`
	// LookingFor is what the reconciler looks for (tools.Effect.Key):
	// "a pull request of acme/app from capstan/x into main carrying …".
	LookingFor string `json:"looking_for,omitempty"`
	// AbsentBy ends the consistency window, on the ledger's clock: not
	// seen by then, the operation is absent. Found ends it sooner.
	AbsentBy time.Time `json:"absent_by,omitzero"`
}

// Line says in one line what the reconciler waits for and until when:
// "looking for <key>; absent if not seen by 14:02:10 UTC (asked 3 times)".
// Empty when the progress names nothing yet.
func (p ReconcileProgress) Line() string {
	if p.LookingFor == "" {
		return ""
	}
	s := "looking for " + p.LookingFor
	if !p.AbsentBy.IsZero() {
		s += "; absent if not seen by " + p.AbsentBy.UTC().Format("15:04:05") + " UTC"
	}
	if p.Asked > 0 {
		s += fmt.Sprintf(" (asked %d times)", p.Asked)
	}
	if p.Waiting != "" {
		s += "; waiting: " + p.Waiting
	}
	return s
}
