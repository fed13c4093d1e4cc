package ledger

import (
	"context"
	"time"
)

// Scope names the execution chain a write belongs to (docs/design.md §5.3):
// a task's namespace and first run id, hashed into Token
// (workflows.ChainScope), with what retention needs to ask Temporal about
// the chain. The activities of a task put it in the context of every
// ledger call they make (WithScope); the stores record it beside what they
// write: the turns' scope column, the chain's row in the tasks table
// (CommitTurn), and the items the chain refers to (item ownership). A
// context without one — a task started before ledger keys were scoped —
// writes rows that retention never deletes.
//
// A chain's operations carry the scope in their ids
// ("<tenant>:<task id>:<token>:…"), which is how retention finds them.
type Scope struct {
	Token      string // "~" and 12 hex digits
	Namespace  string
	WorkflowID string
	RunID      string // the run that wrote
	TaskID     string
}

type scopeKey struct{}

// WithScope returns ctx carrying s for the ledger writes made with it. An
// s without a Token leaves ctx as it is.
func WithScope(ctx context.Context, s Scope) context.Context {
	if s.Token == "" {
		return ctx
	}
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeOf returns the scope ctx carries, the zero Scope when none.
func ScopeOf(ctx context.Context) Scope {
	s, _ := ctx.Value(scopeKey{}).(Scope)
	return s
}

// Chain is one row of the tasks table: an execution chain that wrote to
// the ledger, and the last run of it the ledger saw.
type Chain struct {
	Scope      string
	Namespace  string
	WorkflowID string
	TaskID     string
	RunID      string
	CreatedAt  time.Time
	UpdatedAt  time.Time // the chain's last turn commit
}

// OperationMark is the part of the ids of a chain's operations that names
// the chain: ":<task id>:<token>:".
func (c Chain) OperationMark() string { return ":" + c.TaskID + ":" + c.Scope + ":" }

// Removed counts what retention deleted, or would delete (a dry run).
type Removed struct {
	Tasks, Operations, Turns, Items int
	// Decisions are the chain's policy decisions (Decision).
	Decisions int
	// Bytes are the bytes of the deleted items, turn outputs and
	// operation results.
	Bytes int64
}

// Add adds o to r.
func (r *Removed) Add(o Removed) {
	r.Tasks += o.Tasks
	r.Operations += o.Operations
	r.Turns += o.Turns
	r.Items += o.Items
	r.Decisions += o.Decisions
	r.Bytes += o.Bytes
}

// Unscoped counts the rows written by tasks started before ledger keys
// were scoped, which retention leaves alone.
type Unscoped struct {
	Operations, Turns int
}

// Retention is what a store offers retention (starter gc).
type Retention interface {
	// Chains lists the chains whose last turn commit is before before,
	// oldest first.
	Chains(ctx context.Context, before time.Time) ([]Chain, error)
	// RemoveChain deletes the chain's row, its operations, decisions and turns, its
	// item ownership, and the items no other chain (nor a task without a
	// scope) refers to, in one transaction, and counts them. With dryRun
	// it counts the same and deletes nothing.
	RemoveChain(ctx context.Context, c Chain, dryRun bool) (Removed, error)
	// CountUnscoped counts the operations and turns that belong to no
	// chain.
	CountUnscoped(ctx context.Context) (Unscoped, error)
	// Served returns the Temporal cluster and namespace the ledger serves,
	// as the first gc that proved it recorded them; ok is false while
	// none is recorded.
	Served(ctx context.Context) (s Served, ok bool, err error)
	// AdoptServed records s as the Temporal the ledger serves unless one
	// is recorded already, and returns the one recorded: the first
	// adoption wins, so two gc passes adopting at once agree on one.
	AdoptServed(ctx context.Context, s Served) (Served, error)
}

// Served is the Temporal a ledger serves: retention deletes a chain's
// rows only when this cluster's namespace no longer has the chain, so a
// gc pointed at another cluster or namespace — which has none of the
// ledger's chains — must not read that as "gone".
type Served struct {
	// ClusterID is the cluster's id (GetClusterInfo), which a new cluster
	// (a fresh dev server, a rebuilt database) does not share.
	ClusterID string
	Namespace string
	// AdoptedAt is when it was recorded (the ledger's clock).
	AdoptedAt time.Time
}
