package policy

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/capstanhq/capstan"
)

// The layers a decision comes from (Decision.Layer). A file's layer also
// names the file: "worker FILE@SHA" (the first 12 hex digits of the text's
// SHA-256, so workers of one pool with different floors tell apart) or
// "task FILE".
const (
	// LayerDefault is the built-in default rules (BuiltinRules), as the
	// worker's file loosens them (override), and RuleRef.
	LayerDefault = "default"
	// LayerWorker is the worker's own policy file (CAPSTAN_POLICY): its
	// floor.
	LayerWorker = "worker"
	// LayerTask is the task's recorded rules, and its --require-approval
	// (RuleRequireApproval).
	LayerTask = "task"
)

// Stack is the rule sets one call is decided by (docs/design.md §5.8):
// the default rules, the worker's file and the task's recorded file. Each
// layer decides on its own, its first matching rule deciding (the defaults
// always decide; a file none of whose rules match abstains), and they
// combine one way: a deny in any layer wins, then require_approval, then
// allow. An allow in one layer never overrides another's deny, so a task's
// rules can only narrow what the defaults and the worker allow. The one
// way to loosen a default is a rule of the worker's file with `override:
// default/NAME` (effect allow): when it is the rule that decides the
// worker's layer for a call, the named default does not apply to that
// call. An override among the task's rules lifts nothing. A nil Floor or
// Task is a layer without rules.
type Stack struct {
	// Floor is the worker's policy file (CAPSTAN_POLICY).
	Floor *Policy
	// Task is the policy file the task was started with.
	Task *Policy
}

// Decide is the stack's decision for call c of task t: after normalize, a
// deny of any layer (the defaults, then the worker's, then the task's),
// else a require_approval, else the allow of the most specific layer that
// matched (the task's, the worker's, the defaults'); an allow whose tool or
// class the task requires approval for (Task.RequireApproval) waits for a
// person (RuleRequireApproval).
func (s Stack) Decide(c Call, t Task) Decision {
	c, t, refused, ok := normalize(c, t)
	if !ok {
		return refused
	}
	floor, by, floorOK := s.Floor.decideLayer(c, t, LayerWorker)
	byTask, _, taskOK := s.Task.decideLayer(c, t, LayerTask)
	if floorOK {
		t.lifted = by.override
	}
	layers := []Decision{decideDefaults(c, t)}
	layers[0].Layer = LayerDefault
	if floorOK {
		layers = append(layers, floor)
	}
	if taskOK {
		layers = append(layers, byTask)
	}
	d := layers[len(layers)-1]
	for _, e := range []Effect{Deny, RequireApproval} {
		if i := firstWith(layers, e); i >= 0 {
			d = layers[i]
			break
		}
	}
	if n := t.needsApproval(c); n != "" && d.Allowed() {
		return Decision{Effect: RequireApproval, Rule: RuleRequireApproval, Layer: LayerTask,
			Reason: "this task was started with --require-approval " + n + ": a person approves each such call before it is sent"}
	}
	return d
}

func firstWith(ds []Decision, e Effect) int {
	for i, d := range ds {
		if d.Effect == e {
			return i
		}
	}
	return -1
}

// AlwaysRefused is whether every call of the tool is refused for task t
// whatever its arguments, by the worker's file or by the task's
// (Policy.AlwaysRefused, each layer on its own: a refusal in either wins),
// with the refusing decision. The defaults never refuse a tool whole.
func (s Stack) AlwaysRefused(tool string, class capstan.Class, server string, t Task) (Decision, bool) {
	_, t, _, _ = normalize(Call{}, t)
	if d, ok := s.Floor.AlwaysRefused(tool, class, server, t); ok {
		d.Layer = s.Floor.layer(LayerWorker)
		return d, true
	}
	if d, ok := s.Task.AlwaysRefused(tool, class, server, t); ok {
		d.Layer = s.Task.layer(LayerTask)
		return d, true
	}
	return Decision{}, false
}

// decideLayer is the decision of p's first rule that matches c, named by
// its layer (kind and file), that rule, and whether one did.
func (p *Policy) decideLayer(c Call, t Task, kind string) (Decision, *rule, bool) {
	if p == nil || len(p.rules) == 0 {
		return Decision{}, nil, false
	}
	d, r, ok := p.decideFile(c, t)
	d.Layer = p.layer(kind)
	return d, r, ok
}

// layer names p as a layer of kind: "worker FILE@SHA" for the worker's,
// "task FILE" for the task's.
func (p *Policy) layer(kind string) string {
	if kind == LayerWorker {
		sum := sha256.Sum256(p.source)
		return kind + " " + p.file + "@" + hex.EncodeToString(sum[:6])
	}
	return kind + " " + p.file
}

// Overrides are the default rules p's rules may lift (override), in order;
// none for a policy that overrides nothing.
func (p *Policy) Overrides() []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, r := range p.rules {
		if r.override != "" {
			out = append(out, r.override)
		}
	}
	return out
}
