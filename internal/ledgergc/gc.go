// Package ledgergc is the ledger's retention (docs/design.md §5.3, starter
// gc): it deletes the rows of execution chains that are closed and that
// Temporal no longer has — past their namespace's retention, or deleted —
// and never a running or still-retained chain's. Temporal is the authority
// on whether a chain is over; the ledger only says which chains exist and
// when each last wrote.
package ledgergc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/workflows"
)

// Describer is the one call of Temporal's workflow service gc makes
// (workflowservice.WorkflowServiceClient has it).
type Describer interface {
	DescribeWorkflowExecution(ctx context.Context, in *workflowservice.DescribeWorkflowExecutionRequest, opts ...grpc.CallOption) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// Options is one pass of gc.
type Options struct {
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
}

// Run makes one pass: every chain whose last write is older than
// opts.OlderThan and whose execution Temporal no longer has loses its rows.
func Run(ctx context.Context, st ledger.Retention, svc Describer, opts Options) (Report, error) {
	var rep Report
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	chains, err := st.Chains(ctx, opts.Now().Add(-opts.OlderThan))
	if err != nil {
		return rep, err
	}
	for _, c := range chains {
		rep.Considered++
		live, err := Live(ctx, svc, c)
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			rep.Unchecked++
			opts.Logger.WarnContext(ctx, "ledger gc: cannot ask Temporal about a chain; left alone", "scope", c.Scope,
				"namespace", c.Namespace, "workflow_id", c.WorkflowID, "run_id", c.RunID, "error", err)
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
