package ledgergc_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	"github.com/capstanhq/capstan/internal/ledgergc"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// devServer starts a Temporal dev server of the test's own, on a database
// file of its own: each has a cluster id of its own. (Dev servers on the
// in-memory database all share one fixed cluster id — so a restarted one
// is "the same cluster" with none of its history, the case the check of
// recent chains catches.)
func devServer(t *testing.T) (client.Client, string) {
	t.Helper()
	srv, err := testenv.StartDevServer(context.Background(), nil, "--db-filename", filepath.Join(t.TempDir(), "temporal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	c := srv.Client()
	info, err := c.WorkflowService().GetClusterInfo(context.Background(), &workflowservice.GetClusterInfoRequest{})
	if err != nil || info.GetClusterId() == "" {
		t.Fatalf("GetClusterInfo = %v, %v; want a cluster id", info, err)
	}
	return c, info.GetClusterId()
}

// clock is the ledger's clock: now, moved by a test to write a chain in
// the past.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset = d
}

// ledgerOf opens a fresh SQLite ledger on clk.
func ledgerOf(t *testing.T, clk *clock) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// writeChain commits a turn as the chain of run runID of workflow wid in
// namespace default does, written ago before now.
func writeChain(t *testing.T, st ledger.Store, clk *clock, wid, runID string, ago time.Duration) string {
	t.Helper()
	clk.set(-ago)
	defer clk.set(0)
	scope := workflows.ChainScope("default", runID)
	ctx := ledger.WithScope(context.Background(), ledger.Scope{Token: scope, Namespace: "default", WorkflowID: wid, RunID: runID, TaskID: wid})
	if _, err := st.CommitTurn(ctx, wid+"/"+scope+"/t1", []byte("output of "+wid)); err != nil {
		t.Fatal(err)
	}
	return scope
}

// scopes lists the chains the ledger still has.
func scopes(t *testing.T, st ledger.Store) []string {
	t.Helper()
	cs, err := st.Chains(context.Background(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.Scope)
	}
	return out
}

// running starts a workflow no worker polls for on c: Temporal has it.
func running(t *testing.T, c client.Client, id string) string {
	t.Helper()
	run, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-polls"}, "NoSuchWorkflow")
	if err != nil {
		t.Fatal(err)
	}
	return run.GetRunID()
}

// TestGCDeletesOnlyWhatItCanProveIsGone (issue 32 item 8): a ledger whose
// chains live in one Temporal dev server is collected through another
// (another cluster id), through the right one with another namespace, and
// with none of its recent chains alive. Each refuses with one sentence and
// deletes nothing; before the ledger recorded what it serves, the pass
// through the other server deleted every chain, the running one's too.
// Through the right server and namespace a pass adopts it and deletes only
// the chain that is gone.
func TestGCDeletesOnlyWhatItCanProveIsGone(t *testing.T) {
	if _, err := testenv.TemporalCLI(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	var (
		a, clusterA = devServer(t)
		b, clusterB = devServer(t)
	)
	if clusterA == clusterB {
		t.Fatalf("two dev servers share the cluster id %s", clusterA)
	}
	ctx := context.Background()
	clk := &clock{}
	st := ledgerOf(t, clk)
	runA := running(t, a, "gc-alive")
	alive := writeChain(t, st, clk, "gc-alive", runA, 0)
	// Gone: written two days ago, past the namespace's retention, and
	// never known to either server.
	gone := writeChain(t, st, clk, "gc-gone", "00000000-0000-4000-8000-000000000001", 48*time.Hour)
	both := []string{gone, alive} // oldest first

	pass := func(c client.Client, ns string, dryRun bool) (ledgergc.Report, error) {
		return ledgergc.Run(ctx, st, c.WorkflowService(), ledgergc.Options{Namespace: ns, OlderThan: time.Hour, DryRun: dryRun})
	}
	refused := func(what string, rep ledgergc.Report, err error, want string) {
		t.Helper()
		var re *ledgergc.RefusedError
		if !errors.As(err, &re) {
			t.Fatalf("gc %s = %+v, %v; want a refusal", what, rep, err)
		}
		t.Logf("gc %s: %v", what, err)
		if !strings.Contains(err.Error(), want) || strings.Count(err.Error(), ". ") > 0 || strings.Contains(err.Error(), "\n") {
			t.Errorf("gc %s refused with %q; want one sentence that says %q", what, err, want)
		}
		if rep.Removed != (ledger.Removed{}) || rep.Adopted != nil {
			t.Errorf("gc %s refused but reports %+v", what, rep)
		}
		if got := scopes(t, st); fmt.Sprint(got) != fmt.Sprint(both) {
			t.Fatalf("after gc %s the ledger has chains %v; want both, %v", what, got, both)
		}
	}

	rep, err := pass(b, "default", false)
	refused("through another cluster before the ledger recorded one", rep, err, "is known to namespace default of Temporal cluster "+clusterB)
	if _, ok, err := st.Served(ctx); ok || err != nil {
		t.Fatalf("a refused pass recorded what the ledger serves (%v, %v)", ok, err)
	}
	rep, err = pass(a, "default", true)
	if err != nil || rep.Removed.Tasks != 1 || rep.Kept != 0 || rep.Considered != 1 || rep.Adopted != nil {
		t.Fatalf("gc --dry-run through the ledger's cluster = %+v, %v; want the gone chain counted, nothing recorded", rep, err)
	}
	if got := scopes(t, st); fmt.Sprint(got) != fmt.Sprint(both) {
		t.Fatalf("a dry run left chains %v; want both", got)
	}
	rep, err = pass(a, "default", false)
	if err != nil || rep.Removed.Tasks != 1 || rep.Removed.Turns != 1 || rep.Considered != 1 || rep.Adopted == nil ||
		rep.Adopted.ClusterID != clusterA || rep.Adopted.Namespace != "default" {
		t.Fatalf("gc through the ledger's cluster = %+v, %v; want the gone chain removed and cluster %s adopted", rep, err, clusterA)
	}
	if got := scopes(t, st); len(got) != 1 || got[0] != alive {
		t.Fatalf("after gc the ledger has chains %v; want only the running one, %s", got, alive)
	}
	both = []string{alive}

	rep, err = pass(b, "default", false)
	refused("through another cluster", rep, err, "this ledger serves namespace default of Temporal cluster "+clusterA+", not namespace default of cluster "+clusterB)
	rep, err = pass(a, "other", false)
	refused("through another namespace", rep, err, "not namespace other of cluster "+clusterA)

	// A ledger of the same cluster whose recent chain the cluster does
	// not have (its history wiped, or another cluster's ledger given this
	// one's record): not proof that its old chains are gone.
	st2 := ledgerOf(t, clk)
	if _, err := st2.AdoptServed(ctx, ledger.Served{ClusterID: clusterA, Namespace: "default"}); err != nil {
		t.Fatal(err)
	}
	recent := writeChain(t, st2, clk, "gc-unknown-recent", "00000000-0000-4000-8000-000000000002", 0)
	old := writeChain(t, st2, clk, "gc-unknown-old", "00000000-0000-4000-8000-000000000003", 48*time.Hour)
	rep, err = ledgergc.Run(ctx, st2, a.WorkflowService(), ledgergc.Options{Namespace: "default", OlderThan: 0})
	var re *ledgergc.RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "none of the 1 chain(s) that wrote to this ledger within their namespace's retention") ||
		rep.Removed != (ledger.Removed{}) {
		t.Fatalf("gc of a ledger with no recent chain alive = %+v, %v; want a refusal", rep, err)
	}
	t.Logf("gc with no recent chain alive: %v", err)
	if got := scopes(t, st2); fmt.Sprint(got) != fmt.Sprint([]string{old, recent}) {
		t.Fatalf("after the refused gc the ledger has chains %v; want both", got)
	}

	// A ledger that recorded nothing, whose one chain is old and gone:
	// nothing proves this is its Temporal, so nothing is adopted or deleted.
	st3 := ledgerOf(t, clk)
	lone := writeChain(t, st3, clk, "gc-lone", "00000000-0000-4000-8000-000000000004", 48*time.Hour)
	rep, err = ledgergc.Run(ctx, st3, a.WorkflowService(), ledgergc.Options{Namespace: "default", OlderThan: 0})
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "this ledger has not recorded which Temporal it serves, and none of its 1 chain(s) is alive") ||
		rep.Removed != (ledger.Removed{}) {
		t.Fatalf("gc of a ledger that recorded nothing and has no chain alive = %+v, %v; want a refusal", rep, err)
	}
	if got := scopes(t, st3); len(got) != 1 || got[0] != lone {
		t.Fatalf("after the refused gc the ledger has chains %v; want %s", got, lone)
	}
	if _, ok, err := st3.Served(ctx); ok || err != nil {
		t.Fatalf("a refused pass recorded what the ledger serves (%v, %v)", ok, err)
	}
}
