// Package ledgergc is the ledger's retention (docs/design.md §5.3, starter
// gc): it deletes the rows of execution chains that are closed and that
// Temporal no longer has — past their namespace's retention, or deleted —
// and never a running or still-retained chain's. Temporal is the authority
// on whether a chain is over; the ledger only says which chains exist and
// when each last wrote.
//
// "Temporal no longer has it" is evidence only from the Temporal that had
// it: another cluster, or another namespace, has none of the ledger's
// chains. So a pass first proves it asks the right one — the cluster id
// and namespace the ledger recorded (ledger.Served), adopted by the first
// pass that finds one of the ledger's chains alive — and that Temporal
// still has at least one of the chains that wrote within their
// namespace's retention, which it must keep. A pass that cannot prove
// both refuses with a *RefusedError and deletes nothing.
package ledgergc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Temporal is the part of Temporal's workflow service gc asks
// (workflowservice.WorkflowServiceClient has it).
type Temporal interface {
	GetClusterInfo(ctx context.Context, in *workflowservice.GetClusterInfoRequest, opts ...grpc.CallOption) (*workflowservice.GetClusterInfoResponse, error)
	DescribeNamespace(ctx context.Context, in *workflowservice.DescribeNamespaceRequest, opts ...grpc.CallOption) (*workflowservice.DescribeNamespaceResponse, error)
	Describer
}

// Describer is the call that says whether Temporal has an execution.
type Describer interface {
	DescribeWorkflowExecution(ctx context.Context, in *workflowservice.DescribeWorkflowExecutionRequest, opts ...grpc.CallOption) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// RefusedError is a pass that deleted nothing because it could not prove
// that the Temporal it asks is the one the ledger serves. Its message is
// one sentence for the person who ran gc.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

// clockMargin widens the listing of every chain past now: a chain whose
// last write the ledger's database stamped a little ahead of this clock is
// still listed.
const clockMargin = 24 * time.Hour

// Options is one pass of gc.
type Options struct {
	// Namespace is the namespace of the client gc asks through: with the
	// cluster's id, what the ledger must serve.
	Namespace string
	// OlderThan: only chains whose last turn commit is at least this old
	// are considered.
	OlderThan time.Duration
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	Now    func() time.Time
	Logger *slog.Logger
}

// Report is what one pass found and did.
type Report struct {
	Removed ledger.Removed
	// Considered chains were old enough; Kept of them Temporal still has
	// (running, or closed within retention); Unchecked could not be asked
	// about (the error is logged) and were left alone.
	Considered, Kept, Unchecked int
	// Unscoped are the rows of tasks started before ledger keys were
	// scoped, left alone.
	Unscoped ledger.Unscoped
	// Adopted is set when this pass recorded the Temporal the ledger
	// serves (a ledger that had none; never on a dry run).
	Adopted *ledger.Served
}

// Run makes one pass: every chain whose last write is older than
// opts.OlderThan and whose execution Temporal no longer has loses its rows
// — once the pass has proved that it asks the Temporal the ledger serves
// (see the package comment); otherwise it returns a *RefusedError and
// deletes nothing.
func Run(ctx context.Context, st ledger.Retention, svc Temporal, opts Options) (Report, error) {
	var rep Report
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	info, err := svc.GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return rep, fmt.Errorf("ask Temporal for its cluster id: %w", err)
	}
	here := ledger.Served{ClusterID: info.GetClusterId(), Namespace: opts.Namespace}
	if here.ClusterID == "" || here.Namespace == "" {
		return rep, &RefusedError{Reason: fmt.Sprintf("gc deleted nothing: Temporal gave no cluster id (%q) or no namespace was set (%q)", here.ClusterID, here.Namespace)}
	}
	recorded, ok, err := st.Served(ctx)
	if err != nil {
		return rep, err
	}
	if ok && (recorded.ClusterID != here.ClusterID || recorded.Namespace != here.Namespace) {
		return rep, &RefusedError{Reason: fmt.Sprintf("gc deleted nothing: this ledger serves namespace %s of Temporal cluster %s, not namespace %s of cluster %s",
			recorded.Namespace, recorded.ClusterID, here.Namespace, here.ClusterID)}
	}
	now := opts.Now()
	all, err := st.Chains(ctx, now.Add(clockMargin))
	if err != nil {
		return rep, err
	}
	p := &prover{svc: svc, logger: opts.Logger, live: map[string]bool{}, retention: map[string]time.Duration{}}
	// Newest first: the chains most likely to be alive.
	slices.Reverse(all)
	alive, recent := false, 0
	for _, c := range all {
		ret, err := p.retentionOf(ctx, c.Namespace)
		if err != nil {
			return rep, err
		}
		if !c.UpdatedAt.After(now.Add(-ret)) {
			continue
		}
		recent++
		if alive, err = p.check(ctx, c); err != nil {
			return rep, err
		} else if alive {
			break
		}
	}
	if recent > 0 && !alive {
		return rep, &RefusedError{Reason: fmt.Sprintf("gc deleted nothing: none of the %d chain(s) that wrote to this ledger within their namespace's retention is known to namespace %s of Temporal cluster %s, which must still have them",
			recent, here.Namespace, here.ClusterID)}
	}
	if !ok && len(all) > 0 {
		for _, c := range all {
			if alive {
				break
			}
			if alive, err = p.check(ctx, c); err != nil {
				return rep, err
			}
		}
		if !alive {
			return rep, &RefusedError{Reason: fmt.Sprintf("gc deleted nothing: this ledger has not recorded which Temporal it serves, and none of its %d chain(s) is alive in namespace %s of Temporal cluster %s to prove it is this one",
				len(all), here.Namespace, here.ClusterID)}
		}
		if !opts.DryRun {
			got, err := st.AdoptServed(ctx, here)
			if err != nil {
				return rep, err
			}
			if got.ClusterID != here.ClusterID || got.Namespace != here.Namespace {
				return rep, &RefusedError{Reason: fmt.Sprintf("gc deleted nothing: another gc recorded namespace %s of Temporal cluster %s as the one this ledger serves, not namespace %s of cluster %s",
					got.Namespace, got.ClusterID, here.Namespace, here.ClusterID)}
			}
			rep.Adopted = &got
			opts.Logger.InfoContext(ctx, "ledger gc: recorded the Temporal this ledger serves", "cluster_id", got.ClusterID, "namespace", got.Namespace)
		}
	}
	cutoff := now.Add(-opts.OlderThan)
	slices.Reverse(all) // oldest first again
	for _, c := range all {
		if !c.UpdatedAt.Before(cutoff) {
			continue
		}
		rep.Considered++
		live, err := p.check(ctx, c)
		if err != nil {
			return rep, err
		}
		if p.unchecked[c.Scope] {
			rep.Unchecked++
			continue
		}
		if live {
			rep.Kept++
			continue
		}
		r, err := st.RemoveChain(ctx, c, opts.DryRun)
		if err != nil {
			return rep, err
		}
		rep.Removed.Add(r)
		opts.Logger.InfoContext(ctx, "ledger gc: chain removed", "scope", c.Scope, "namespace", c.Namespace,
			"workflow_id", c.WorkflowID, "dry_run", opts.DryRun, "operations", r.Operations, "decisions", r.Decisions, "turns", r.Turns, "items", r.Items, "bytes", r.Bytes)
	}
	rep.Unscoped, err = st.CountUnscoped(ctx)
	return rep, err
}

// prover asks Temporal about each chain and namespace once per pass.
type prover struct {
	svc       Temporal
	logger    *slog.Logger
	live      map[string]bool // by chain scope
	unchecked map[string]bool // chains Temporal could not be asked about
	retention map[string]time.Duration
}

// check is Live once per chain. A chain Temporal cannot be asked about is
// not alive, is marked unchecked (and so never deleted) and is logged;
// only the end of ctx is an error.
func (p *prover) check(ctx context.Context, c ledger.Chain) (bool, error) {
	if live, ok := p.live[c.Scope]; ok {
		return live, nil
	}
	live, err := Live(ctx, p.svc, c)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if p.unchecked == nil {
			p.unchecked = map[string]bool{}
		}
		p.unchecked[c.Scope] = true
		p.logger.WarnContext(ctx, "ledger gc: cannot ask Temporal about a chain; left alone", "scope", c.Scope,
			"namespace", c.Namespace, "workflow_id", c.WorkflowID, "run_id", c.RunID, "error", err)
	}
	p.live[c.Scope] = live
	return live, nil
}

// retentionOf is how long namespace ns keeps a closed execution; zero for
// a namespace Temporal does not have (its chains are all gone).
func (p *prover) retentionOf(ctx context.Context, ns string) (time.Duration, error) {
	if d, ok := p.retention[ns]; ok {
		return d, nil
	}
	resp, err := p.svc.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	var nsnf *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &nsnf):
	case err != nil:
		return 0, fmt.Errorf("ask Temporal for the retention of namespace %s: %w", ns, err)
	default:
		p.retention[ns] = resp.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration()
	}
	return p.retention[ns], nil
}

// Live reports whether Temporal still has c's chain: the last run the
// ledger saw, or — when that one is gone — the workflow's current run if
// it belongs to the same chain (a reset run that committed no turn).
// Either answer other than found or NotFound is an error: nothing is
// deleted on a guess.
func Live(ctx context.Context, svc Describer, c ledger.Chain) (bool, error) {
	found, _, err := describe(ctx, svc, c.Namespace, c.WorkflowID, c.RunID)
	if err != nil || found {
		return found, err
	}
	found, first, err := describe(ctx, svc, c.Namespace, c.WorkflowID, "")
	if err != nil || !found {
		return false, err
	}
	// A server that does not say which chain its run belongs to: keep.
	return first == "" || workflows.ChainScope(c.Namespace, first) == c.Scope, nil
}

// describe asks for one execution: found, and its chain's first run id.
// An unknown namespace is a chain Temporal no longer has.
func describe(ctx context.Context, svc Describer, ns, wid, run string) (bool, string, error) {
	resp, err := svc.DescribeWorkflowExecution(ctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: ns, Execution: &commonpb.WorkflowExecution{WorkflowId: wid, RunId: run},
	})
	var nf *serviceerror.NotFound
	var nsnf *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &nf) || errors.As(err, &nsnf):
		return false, "", nil
	case err != nil:
		return false, "", fmt.Errorf("describe workflow %s run %q in namespace %s: %w", wid, run, ns, err)
	}
	return true, resp.GetWorkflowExecutionInfo().GetFirstRunId(), nil
}
