package ledgertest

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// RunShared runs the cases that need several stores over one database, the
// way the workers of a pool share one ledger: stores opened at the same time
// on a fresh database, claims racing through different stores, a zombie and
// its successor on different stores, and data read back after every store
// was closed.
//
// newDatabase prepares one fresh, empty database for t and returns open,
// which opens another store on it reading time only from now. open must be
// safe to call from several goroutines at once and must arrange for each
// store it returns to be closed when t ends (Close must therefore tolerate a
// second call: a case may close a store itself). Subtests run one after
// another, never in parallel.
func RunShared(t *testing.T, newDatabase func(t *testing.T, now func() time.Time) (open func() (ledger.Store, error))) {
	t.Helper()
	runCases(t, sharedCases, func(h *h) {
		if h.open = newDatabase(h.T, h.clock.Now); h.open == nil {
			h.Fatal("newDatabase returned a nil open function")
		}
	})
}

var sharedCases = []testCase{
	{"ConcurrentOpenOfAFreshDatabase", testConcurrentOpen},
	{"ClaimsSerializeAcrossStores", testClaimsAcrossStores},
	{"ZombieOnAnotherStore", testZombieAcrossStores},
	{"DataSurvivesReopen", testDataSurvivesReopen},
}

// openStore opens another store on the shared database.
func (h *h) openStore() ledger.Store {
	h.Helper()
	s, err := h.open()
	if err != nil {
		h.Fatalf("open another store: %v", err)
	}
	if s == nil {
		h.Fatal("open returned a nil store")
	}
	return s
}

// Workers of a pool start together: stores opened at once on a database
// nobody has opened yet all succeed (creating the schema is safe to race),
// and each sees what another wrote.
func testConcurrentOpen(h *h) {
	const n = 4
	stores := make([]ledger.Store, n)
	err := race(n, func(i int) error {
		var err error
		stores[i], err = h.open()
		return err
	})
	if err != nil {
		h.Fatalf("opening %d stores at once: %v", n, err)
	}
	h.s = stores[0]
	op := newOp("op-after-open", "task-1")
	want := h.claim("worker-a/1", op)
	for i, s := range stores {
		got, err := s.Get(h.ctx, op.ID)
		if err != nil {
			h.Fatalf("store %d: Get: %v", i, err)
		}
		if d := diff(got, want); d != "" {
			h.Fatalf("store %d sees %s", i, d)
		}
	}
}

// Claims through different stores are as compare-and-set as claims through
// one: only the database can keep them apart.
func testClaimsAcrossStores(h *h) {
	stores := []ledger.Store{h.openStore(), h.openStore()}
	h.s = stores[0]
	claimAndRunRace(h, stores, "task-shared", 20, 16)
}

// The zombie case of testZombie with the zombie and its successor on
// different stores: no store may trust what it read before the successor
// wrote.
func testZombieAcrossStores(h *h) {
	zombieStore, successor := h.openStore(), h.openStore()
	h.s = successor
	op := newOp("op-zombie-elsewhere", "task-1")
	res, err := zombieStore.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: "worker-a/1", Lease: Lease})
	if err != nil || res.Status != ledger.Claimed {
		h.Fatalf("Claim on the first store: %v, %v; want claimed", res.Status, err)
	}
	a := res.Op
	h.clock.Advance(Lease + time.Second)
	b := h.claim("worker-b/1", op)
	h.succeed(b, "pr/42", []byte("by B"))
	survivor := h.get(op.ID)

	h.expectErrIs("zombie MarkRunning", zombieStore.MarkRunning(h.ctx, op.ID, a.Fence, refusedFacts), ledger.ErrFenced, op.ID)
	err = zombieStore.Complete(h.ctx, ledger.Completion{ID: op.ID, Fence: a.Fence, State: capstan.OutcomeSucceeded, ExternalID: "pr/43", Result: []byte("by A")})
	h.expectErrIs("zombie Complete", err, ledger.ErrFenced, op.ID)
	h.expectErrIs("zombie Release", zombieStore.Release(h.ctx, op.ID, a.Fence), ledger.ErrFenced, op.ID)
	h.unchanged("the zombie on another store", survivor)
	if got, err := zombieStore.Get(h.ctx, op.ID); err != nil || diff(got, survivor) != "" {
		h.Fatalf("the zombie's store reads %+v, %v; want the successor's record", got, err)
	}
}

// What a store wrote is there, byte for byte, after every store on the
// database was closed and a new one opened (opening an existing database is
// idempotent).
func testDataSurvivesReopen(h *h) {
	h.s = h.openStore()
	op := newOp("op-durable", "task-1")
	c := h.claim("worker-a/1", op)
	h.succeed(c, "ts-1", []byte("ok"))
	ref, err := h.s.PutItem(h.ctx, []byte("item"))
	if err != nil {
		h.Fatal(err)
	}
	want := h.get(op.ID)
	if err := h.s.Close(); err != nil {
		h.Fatalf("Close: %v", err)
	}
	if err := h.s.Close(); err != nil {
		h.Fatalf("second Close: %v", err)
	}

	h.s = h.openStore()
	if !want.CreatedAt.Equal(Epoch) {
		h.Fatalf("CreatedAt %v, want %v", want.CreatedAt, Epoch)
	}
	if d := diff(h.get(op.ID), want); d != "" {
		h.Fatalf("after reopen: %s", d)
	}
	h.expectStatus("worker-b/1", op, ledger.AlreadySucceeded)
	if b, err := h.s.GetItem(h.ctx, ref); err != nil || string(b) != "item" {
		h.Fatalf("GetItem after reopen: %q, %v", b, err)
	}
}
