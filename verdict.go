package capstan

// Verdict is what a reconciler concluded about an effect whose outcome was
// unknown (docs/design.md §5.4, §5.5): from one question to the external
// system, or from all of them through the consistency window. A person's
// resolution is a verdict too (found or absent).
type Verdict string

// Verdicts. The Reconcile activity returns only the final ones (Final): it
// asks again itself, with jittered backoff, while the answer is not_yet.
const (
	// VerdictFound: exactly one effect of the operation exists; the
	// operation succeeded.
	VerdictFound Verdict = "found"
	// VerdictAbsent: the effect certainly does not exist (not seen through
	// the whole consistency window, with every question answered); the
	// operation may be executed again with the same id.
	VerdictAbsent Verdict = "absent"
	// VerdictNotYet: not seen, but the external system may still be
	// catching up; ask again within the consistency window.
	VerdictNotYet Verdict = "not_yet"
	// VerdictIndeterminate: nobody can tell — several effects carry the
	// operation's mark, something exists that may or may not be it, or the
	// reconciler could not ask through the whole window. A person decides.
	VerdictIndeterminate Verdict = "indeterminate"
)

// Final reports whether v ends a reconciliation: every verdict but not_yet.
func (v Verdict) Final() bool {
	return v == VerdictFound || v == VerdictAbsent || v == VerdictIndeterminate
}

// Outcome is what the verdict makes known about the effect: found →
// succeeded, absent → absent, indeterminate → needs_human, and not_yet (or
// a verdict this release does not know) → still unknown.
func (v Verdict) Outcome() Outcome {
	switch v {
	case VerdictFound:
		return OutcomeSucceeded
	case VerdictAbsent:
		return OutcomeAbsent
	case VerdictIndeterminate:
		return OutcomeNeedsHuman
	}
	return OutcomeUnknown
}

// String is the verdict's one spelling.
func (v Verdict) String() string { return string(v) }
