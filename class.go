package capstan

// Class is a tool's safety class (docs/design.md §5.1): what may be done
// after a call of it timed out or failed ambiguously.
type Class string

// Safety classes.
const (
	// ClassReadOnly tools have no effect; retry freely, bounded, with
	// jitter.
	ClassReadOnly Class = "read_only"
	// ClassIdempotent tools may be repeated with the same operation id.
	ClassIdempotent Class = "idempotent"
	// ClassConditional tools are reconciled by business key and only
	// created when confirmed absent.
	ClassConditional Class = "conditional"
	// ClassUnsafe tools are reconciled by an embedded marker; if that
	// cannot tell, a person decides.
	ClassUnsafe Class = "unsafe"
)
