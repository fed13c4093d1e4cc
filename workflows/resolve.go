package workflows

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/config"
)

// UpdateResolve is the update a person sends to settle an operation that
// nobody else could tell (docs/design.md §5.4): `starter resolve`.
const UpdateResolve = "resolve"

// Decisions a person can take on an operation that needs one.
const (
	// DecisionFound: the effect happened; URL names it.
	DecisionFound = "found"
	// DecisionAbsent: the effect did not happen; execute it again.
	DecisionAbsent = "absent"
	// DecisionAbort: stop the task; the operation stays needs_human.
	DecisionAbort = "abort"
)

// ResolveRequest is the resolve update's argument.
type ResolveRequest struct {
	OperationID string `json:"operation_id"`
	Decision    string `json:"decision"`
	URL         string `json:"url,omitempty"`
}

// ResolveResult is the resolve update's answer.
type ResolveResult struct {
	OperationID string `json:"operation_id"`
	Decision    string `json:"decision"`
}

// validateResolve refuses, before anything is recorded in history, a
// request the task cannot act on. It reads state only.
func (t *task) validateResolve(req ResolveRequest) error {
	state, known := t.operationState(req.OperationID)
	switch {
	case !known:
		return fmt.Errorf("task %s has no operation %q", t.in.TaskID, req.OperationID)
	case !t.waiting[req.OperationID]:
		return fmt.Errorf("operation %s is %s and needs no person", req.OperationID, state)
	}
	switch req.Decision {
	case DecisionFound:
		u, err := url.Parse(req.URL)
		if req.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("found needs the http(s) URL of what you found, not %q", req.URL)
		}
	case DecisionAbsent, DecisionAbort:
		if req.URL != "" {
			return fmt.Errorf("only found takes a URL; %s does not", req.Decision)
		}
	default:
		return fmt.Errorf("the decision must be found, absent or abort, not %q", req.Decision)
	}
	return nil
}

// resolve records a validated decision; the operation's waiting loop picks
// it up.
func (t *task) resolve(ctx workflow.Context, req ResolveRequest) (ResolveResult, error) {
	t.resolutions[req.OperationID] = req
	return ResolveResult{OperationID: req.OperationID, Decision: req.Decision}, nil
}

// operationState finds a tool operation or a delivery by its id.
func (t *task) operationState(id string) (string, bool) {
	for _, op := range t.result.Operations {
		if op.OperationID == id {
			return string(op.State), true
		}
	}
	for _, d := range t.result.Deliveries {
		if d.OperationID == id {
			return string(d.State), true
		}
	}
	return "", false
}

func (t *task) humanTimeout() time.Duration {
	if t.in.HumanTimeout > 0 {
		return t.in.HumanTimeout
	}
	return config.DefaultHumanTimeout
}

// errAborted is returned by askPerson when the person chose abort.
var errAborted = errors.New("aborted by a person")

// askPerson marks the task as needing a person for operation opID, says so
// in its search attributes and current details, and waits for the resolve
// update or the task's human timeout.
func (t *task) askPerson(ctx workflow.Context, opID, reason string) (ResolveRequest, error) {
	t.waiting[opID] = true
	t.askedPerson = true
	defer delete(t.waiting, opID)
	t.result.Status = StatusNeedsHuman
	if err := workflow.UpsertTypedSearchAttributes(ctx, AttrStatus.ValueSet(string(StatusNeedsHuman)), AttrNeedsHuman.ValueSet(true)); err != nil {
		return ResolveRequest{}, err
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Needs a person.** Operation `%s` could not be settled: %s\n\n"+
		"Resolve it with `starter resolve %s %s --found URL` (it happened), `--absent` (it did not; capstan executes it again) or `--abort`.",
		opID, reason, t.in.TaskID, opID))
	t.note(ctx, "operation %s needs a person: %s", opID, reason)

	ok, err := workflow.AwaitWithTimeout(ctx, t.humanTimeout(), func() bool {
		_, done := t.resolutions[opID]
		return done
	})
	if err != nil {
		return ResolveRequest{}, err
	}
	if !ok {
		return ResolveRequest{}, fail(FailNeedsHumanTimeout, "operation %s waited %s for a person and nobody resolved it (%s)", opID, t.humanTimeout(), reason)
	}
	req := t.resolutions[opID]
	delete(t.resolutions, opID)
	t.result.Status = StatusRunning
	workflow.SetCurrentDetails(ctx, "")
	if err := workflow.UpsertTypedSearchAttributes(ctx, AttrStatus.ValueSet(string(StatusRunning)), AttrNeedsHuman.ValueSet(len(t.waiting) > 1)); err != nil {
		return req, err
	}
	t.note(ctx, "operation %s resolved by a person: %s %s", opID, req.Decision, req.URL)
	if req.Decision == DecisionAbort {
		return req, errAborted
	}
	return req, nil
}
