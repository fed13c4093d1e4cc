package activities_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// A worker that ran a task's turns and tool calls reads nothing of their
// transcript from the ledger again: each later turn loads its manifests,
// messages and tool arguments from the items this worker stored. Another
// worker, with nothing cached, loads the same transcript from the ledger.
func TestTurnsReadTheirTranscriptFromThisWorkersItems(t *testing.T) {
	t.Parallel()
	reads := &itemReads{}
	f := newFixture(t, func(d *activities.Deps) { reads.Ledger = d.Ledger; d.Ledger = reads })
	k := newTask(t, f, 20)
	k.step(t)
	for k.turn < 6 {
		before := reads.calls.Load()
		k.step(t)
		if n := reads.calls.Load() - before; n != 0 {
			t.Errorf("turn %d (and its tool call) read items from the ledger %d times, want 0: this worker stored them", k.turn, n)
		}
	}
	mine, err := f.acts.ManifestRefs(context.Background(), k.transcript)
	if err != nil {
		t.Fatal(err)
	}
	other, err := activities.New(activities.Deps{Ledger: f.ledger, Tools: tool.NewRegistry(), Identity: "another-worker"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.ManifestRefs(context.Background(), k.transcript)
	if err != nil || len(theirs) != len(mine) || len(mine) < 6 {
		t.Fatalf("another worker's transcript: %d items, %v; this worker's: %d", len(theirs), err, len(mine))
	}
	for i := range mine {
		if mine[i] != theirs[i] {
			t.Fatalf("item %d: %s here, %s from the ledger", i, mine[i], theirs[i])
		}
	}
}

// A worker told to keep no items (CAPSTAN_ITEM_CACHE_BYTES=0) reads each
// turn's transcript from the ledger, and the task goes on as it would.
func TestTurnsReadTheLedgerWithNoItemCache(t *testing.T) {
	t.Parallel()
	reads := &itemReads{}
	f := newFixture(t, func(d *activities.Deps) { reads.Ledger = d.Ledger; d.Ledger = reads; d.ItemCacheBytes = -1 })
	k := newTask(t, f, 20)
	k.step(t)
	for k.turn < 4 {
		before := reads.calls.Load()
		k.step(t)
		if reads.calls.Load() == before {
			t.Errorf("turn %d (and its tool call) read no items from the ledger, want reads: this worker keeps none", k.turn)
		}
	}
}

// The cache keeps at most its limit: past it the least recently used item
// leaves, and is read from the ledger again; an item over an eighth of the
// limit is never kept.
func TestItemCacheKeepsItsLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := openLedger(t)
	reads := &itemReads{Ledger: store}
	c := activities.NewItemCache(reads, 8*100)
	var err error
	item := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 100) }
	refs := make([]string, 9)
	for i := range refs {
		if refs[i], err = c.PutItem(ctx, item(i)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			continue
		}
		// Item 1 is read after each put, so it stays the most recently used.
		if _, err := c.GetItem(ctx, refs[1]); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.calls.Load(); n != 0 {
		t.Fatalf("%d ledger reads while the items fit, want 0", n)
	}
	// Nine items of 100 bytes under a limit of 800: item 0, the least
	// recently used, left; item 1, read all along, stayed.
	for _, tc := range []struct {
		i     int
		reads int64
	}{{1, 0}, {8, 0}, {0, 1}} {
		before := reads.calls.Load()
		got, err := c.GetItem(ctx, refs[tc.i])
		if err != nil || !bytes.Equal(got, item(tc.i)) {
			t.Fatalf("item %d: %q, %v", tc.i, got, err)
		}
		if n := reads.calls.Load() - before; n != tc.reads {
			t.Errorf("item %d: %d ledger reads, want %d", tc.i, n, tc.reads)
		}
	}
	big := bytes.Repeat([]byte{'z'}, 101)
	ref, err := c.PutItem(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	before := reads.calls.Load()
	if _, err := c.GetItem(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if reads.calls.Load() == before {
		t.Errorf("an item over an eighth of the limit was read from memory; want it never kept")
	}
}

// The cache holds only what the ledger stored: the item of a completion
// the ledger refused is not read from it, and an answer is a copy, so a
// caller changing it changes nothing another reads.
func TestItemCacheHoldsOnlyWhatTheLedgerStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := openLedger(t)
	c := activities.NewItemCache(store, config.DefaultItemCacheBytes)
	claim, err := c.Claim(ctx, ledger.ClaimRequest{Op: ledger.Operation{ID: "op", Kind: githubtools.NameCreateBranch, RequestHash: "h"},
		Owner: "w", Lease: time.Minute, Running: true})
	if err != nil {
		t.Fatal(err)
	}
	refused := []byte(`{"role":"tool","content":"refused write"}`)
	err = c.Complete(ctx, ledger.Completion{ID: "op", Fence: claim.Op.Fence + 1, State: capstan.OutcomeSucceeded, Items: [][]byte{refused}})
	if !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("Complete under a stale fence: %v, want ErrFenced", err)
	}
	if _, err := c.GetItem(ctx, ledger.ItemRef(refused)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("GetItem of a refused completion's item: %v, want ErrNotFound", err)
	}
	if _, err := c.GetItems(ctx, []string{ledger.ItemRef(refused)}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("GetItems of a refused completion's item: %v, want ErrNotFound", err)
	}
	stored := []byte(`{"role":"tool","content":"done"}`)
	if err := c.Complete(ctx, ledger.Completion{ID: "op", Fence: claim.Op.Fence, State: capstan.OutcomeSucceeded, Items: [][]byte{stored}}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.ItemRef(stored)
	got, err := c.GetItem(ctx, ref)
	if err != nil || !bytes.Equal(got, stored) {
		t.Fatalf("GetItem = %q, %v; want %q", got, err, stored)
	}
	got[0] = 'X'
	all, err := c.GetItems(ctx, []string{ref, ref})
	if err != nil || len(all) != 2 || !bytes.Equal(all[0], stored) || !bytes.Equal(all[1], stored) {
		t.Fatalf("GetItems = %q, %v; want the stored item twice, unchanged", all, err)
	}
}

// openLedger is a SQLite ledger of the test's own, closed with it.
func openLedger(t *testing.T) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}
