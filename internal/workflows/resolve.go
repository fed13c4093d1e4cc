package workflows

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
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
	// OperationID names the operation by MatchOperation's rule: its id,
	// or an ending of it at a ":" boundary.
	OperationID string `json:"operation_id"`
	Decision    string `json:"decision"`
	URL         string `json:"url,omitempty"`
	// ResolvedBy names the person (`starter resolve --as`, by default
	// user@host). Absent from the updates of tasks started before it.
	ResolvedBy string `json:"resolved_by,omitempty"`
}

// ResolveResult is the resolve update's answer.
type ResolveResult struct {
	OperationID string `json:"operation_id"`
	Decision    string `json:"decision"`
	// ExternalID is, for found, the effect as the worker read it back.
	ExternalID string `json:"external_id,omitempty"`
	ResolvedBy string `json:"resolved_by,omitempty"`
}

// resolveBook remembers, per operation, the resolution last taken (so a
// later one is told who resolved it) and the worker's answer to a found
// whose URL it reads back (for the update that waits for it). Its maps are
// made on first use.
type resolveBook struct {
	taken   map[string]ResolveRequest
	checked map[string]*foundCheck
}

// foundCheck is the worker's answer to a person's found: refused says why
// it was not accepted; empty, it was.
type foundCheck struct {
	externalID string
	refused    string
}

// validateResolve refuses, before anything is recorded in history, a
// request the task cannot act on. It reads state only.
func (t *task) validateResolve(req ResolveRequest) error {
	id, err := MatchOperation(OperationIDs(t.result), req.OperationID)
	if err != nil {
		return fmt.Errorf("task %s has %v", t.in.TaskID, err)
	}
	if err := t.resolvable(id); err != nil {
		return err
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

// resolvable is the compare of the resolution's compare-and-set: operation
// id waits for a person and nobody has resolved it yet. Else it says who
// did, or that the operation needs no person.
func (t *task) resolvable(id string) error {
	if req, pending := t.resolutions[id]; pending {
		return alreadyResolved(id, req)
	}
	if t.waiting[id] {
		return nil
	}
	if req, ok := t.answered.taken[id]; ok {
		return alreadyResolved(id, req)
	}
	state, _ := t.operationState(id)
	return fmt.Errorf("operation %s is %s and needs no person", id, state)
}

func alreadyResolved(id string, req ResolveRequest) error {
	who := req.ResolvedBy
	if who == "" {
		who = "someone"
	}
	what := req.Decision
	if req.URL != "" {
		what += " " + req.URL
	}
	return fmt.Errorf("operation %s was already resolved by %s (%s); nothing was changed", id, who, what)
}

// resolve records a validated decision; the operation's waiting loop picks
// it up. Since changeResolveOnce it sets the resolution only if nobody has
// (another update may have been accepted in the same workflow task, after
// this one's validator ran), and a found waits for the worker to read its
// URL back: a refusal is the update's error, and the operation waits for a
// person again.
func (t *task) resolve(ctx workflow.Context, req ResolveRequest) (ResolveResult, error) {
	id, err := MatchOperation(OperationIDs(t.result), req.OperationID)
	if err != nil {
		return ResolveResult{}, fmt.Errorf("task %s has %v", t.in.TaskID, err)
	}
	req.OperationID = id
	res := ResolveResult{OperationID: id, Decision: req.Decision, ResolvedBy: req.ResolvedBy}
	if !t.since(ctx, changeResolveOnce) {
		t.resolutions[id] = req
		return res, nil
	}
	if err := t.resolvable(id); err != nil {
		return ResolveResult{}, err
	}
	t.resolutions[id] = req
	if req.Decision != DecisionFound {
		return res, nil
	}
	check := &foundCheck{}
	t.answered.await(id, check)
	if err := workflow.Await(ctx, func() bool { return t.answered.checked[id] != check }); err != nil {
		return ResolveResult{}, err
	}
	if check.refused != "" {
		return ResolveResult{}, errors.New(check.refused)
	}
	res.ExternalID = check.externalID
	return res, nil
}

// await registers the check a found's update waits for.
func (b *resolveBook) await(id string, c *foundCheck) {
	if b.checked == nil {
		b.checked = map[string]*foundCheck{}
	}
	b.checked[id] = c
}

// take remembers the resolution the operation's waiting loop took.
func (b *resolveBook) take(req ResolveRequest) {
	if b.taken == nil {
		b.taken = map[string]ResolveRequest{}
	}
	b.taken[req.OperationID] = req
}

// answerFound gives the update that waits for it the worker's answer to a
// found on operation id: accepted when r is found, else refused with r's
// reason. A refused resolution is forgotten, so that a person may resolve
// the operation again.
func (t *task) answerFound(ctx workflow.Context, id string, r contract.ReconcileResult) {
	c := t.answered.checked[id]
	delete(t.answered.checked, id)
	if r.Verdict == capstan.VerdictFound {
		if c != nil {
			c.externalID = r.ExternalID
		}
		return
	}
	who := t.answered.taken[id].ResolvedBy
	delete(t.answered.taken, id)
	t.setResolvedBy(id, "")
	refused := fmt.Sprintf("the found URL was not accepted, and operation %s still waits for a person: %s", id, r.Reason)
	if c != nil {
		c.refused = refused
	}
	t.note(ctx, "operation %s: the found of %s was not accepted: %s", id, orSomeone(who), r.Reason)
}

func orSomeone(who string) string {
	if who == "" {
		return "a person"
	}
	return who
}

// setResolvedBy records who resolved operation id in the task's result.
func (t *task) setResolvedBy(id, who string) {
	for i := range t.result.Operations {
		if t.result.Operations[i].OperationID == id {
			t.result.Operations[i].ResolvedBy = who
		}
	}
	for i := range t.result.Deliveries {
		if t.result.Deliveries[i].OperationID == id {
			t.result.Deliveries[i].ResolvedBy = who
		}
	}
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
	if err := workflow.UpsertTypedSearchAttributes(ctx, AttrStatus.ValueSet(string(StatusNeedsHuman)), t.flagUpdate(ctx, FlagNeedsHuman, true)); err != nil {
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
	t.answered.take(req)
	t.setResolvedBy(opID, req.ResolvedBy)
	t.result.Status = StatusRunning
	workflow.SetCurrentDetails(ctx, "")
	if err := workflow.UpsertTypedSearchAttributes(ctx, AttrStatus.ValueSet(string(StatusRunning)), t.flagUpdate(ctx, FlagNeedsHuman, len(t.waiting) > 1)); err != nil {
		return req, err
	}
	if req.ResolvedBy == "" {
		t.note(ctx, "operation %s resolved by a person: %s %s", opID, req.Decision, req.URL)
	} else {
		t.note(ctx, "operation %s resolved by %s: %s %s", opID, req.ResolvedBy, req.Decision, req.URL)
	}
	if req.Decision == DecisionAbort {
		return req, errAborted
	}
	return req, nil
}
