// Package ledgertest is the contract suite every ledger.Store implementation
// must pass. Run it from the implementation's own tests:
//
//	func TestContract(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T, now func() time.Time) ledger.Store {
//			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), sqlite.Options{Now: now})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// RunShared adds the cases that need several stores over one database, as
// several worker processes have, RunClocks those of workers whose clocks
// disagree with the ledger's, and BenchmarkClaim measures claims per
// second.
//
// The suite states the ledger's rules as tests: claims are compare-and-set,
// a stale fence never writes, a success is never performed twice, an
// operation that may have been sent is never handed out again without
// reconciliation, and items are content-addressed. Each subtest gets a fresh,
// empty store and its own Clock; time only moves when a test advances it, in
// whole microseconds, so stores with microsecond timestamps (PostgreSQL)
// compare equal.
package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

// Clock is a fake clock safe for concurrent use. Pass its Now method to the
// store under test.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock that reads start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// Epoch is where every subtest's clock starts.
var Epoch = time.Date(2030, time.March, 4, 5, 6, 7, 123456000, time.UTC)

// Lease is the lease every claim in the suite asks for unless it says
// otherwise.
const Lease = 30 * time.Second

// Run runs the contract suite. newStore must return a fresh, empty store that
// reads time only from now, and arrange for it to be closed when t ends.
// Subtests run one after another, never in parallel.
func Run(t *testing.T, newStore func(t *testing.T, now func() time.Time) ledger.Store) {
	t.Helper()
	run(t, newStore, false)
}

func run(t *testing.T, newStore func(t *testing.T, now func() time.Time) ledger.Store, sealed bool) {
	t.Helper()
	runCases(t, cases, func(h *h) {
		h.sealed = sealed
		if h.s = newStore(h.T, h.clock.Now); h.s == nil {
			h.Fatal("newStore returned nil")
		}
	})
}

// runCases runs each case as a subtest on a harness with its own clock,
// which setup completes.
func runCases(t *testing.T, cases []testCase, setup func(*h)) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &h{T: t, ctx: context.Background(), clock: NewClock(Epoch)}
			setup(h)
			c.fn(h)
		})
	}
}

type testCase struct {
	name string
	fn   func(*h)
}

// cases lists every subtest; the rules live in claim.go, writes.go,
// misc.go, turns.go, renew.go, reconcile.go, facts.go, batched.go and
// concurrency.go.
var cases = []testCase{
	{"ClaimNew", testClaimNew},
	{"ClaimValidation", testClaimValidation},
	{"ReplayedSuccessReturnsStoredResult", testReplayedSuccess},
	{"ConflictOnOtherRequestHash", testConflict},
	{"LiveLeaseElsewhereIsInProgress", testLiveLeaseElsewhere},
	{"OwnerReclaimsOwnLiveClaim", testOwnerReclaims},
	{"ExpiredClaimedLeaseIsReclaimed", testExpiredClaimed},
	{"RunningWithExpiredLeaseMustReconcile", testRunningExpired},
	{"UnknownAndNeedsHumanMustReconcile", testUnknownNeedsHuman},
	{"FailedAndAbsentAreReclaimed", testFailedAbsentReclaimed},
	{"ZombieCannotOverwriteSuccessor", testZombie},
	{"ZombieAfterReconcileCannotOverwrite", testZombieAfterReconcile},
	{"MarkRunningRules", testMarkRunningRules},
	{"CompleteRules", testCompleteRules},
	{"ReleaseThenReclaim", testReleaseThenReclaim},
	{"ReleaseRefusesSentOperations", testReleaseRefusesSent},
	{"AttemptCounting", testAttemptCounting},
	{"NotFound", testNotFound},
	{"ListByTaskOrder", testListByTask},
	{"ItemsDedupeAndRoundTrip", testItems},
	{"ItemRefValidation", testItemRefValidation},
	{"GetItems", testGetItems},
	{"TakeForReconcile", testTakeForReconcile},
	{"FactsRecordedAtMarkRunning", testFactsRecordedAtMarkRunning},
	{"ZombieCannotOverwriteReconcilerVerdict", testZombieCannotOverwriteVerdict},
	{"ZombieCannotOverwriteNeedsHuman", testZombieCannotOverwriteNeedsHuman},
	{"ExpiredRunningIsReconciledNotReExecuted", testExpiredRunningIsReconciledNotReExecuted},
	{"TakeForReconcileRefusesLiveLease", testTakeRefusesLiveLease},
	{"TakeForReconcileSettled", testTakeSettled},
	{"TakeForReconcileValidation", testTakeValidation},
	{"ConcurrentClaimsOneWinner", testConcurrentClaims},
	{"ConcurrentReclaimsOneWinner", testConcurrentReclaims},
	{"ConcurrentClaimsManyOperations", testConcurrentClaimsMany},
	{"RenewKeepsTheLeaseLive", testRenewKeepsTheLeaseLive},
	{"RenewRules", testRenewRules},
	{"TurnCommitsOnce", testTurnCommitsOnce},
	{"ConcurrentTurnCommitsAgree", testConcurrentTurnCommits},
	{"ClaimRunning", testClaimRunning},
	{"ReclaimRunning", testReclaimRunning},
	{"ClaimRunningRecordsFacts", testClaimRunningRecordsFacts},
	{"CompleteStoresItems", testCompleteStoresItems},
	{"CommitTurnStoresItems", testCommitTurnStoresItems},
	{"ConcurrentWritesFailAlone", testConcurrentWritesFailAlone},
	{"RetentionRemovesOneChain", testRetentionRemovesOneChain},
	{"RetentionCollectsAZombiesItem", testRetentionCollectsAZombiesItem},
	{"ServedIsAdoptedOnce", testServedIsAdoptedOnce},
	{"DecisionRecordedOnce", testDecisionRecordedOnce},
	{"ClaimRecordsDecision", testClaimRecordsDecision},
	{"ClaimDecidedOtherwise", testClaimDecidedOtherwise},
	{"ClaimDecisionOnConflict", testClaimDecisionOnConflict},
	{"ConcurrentDecidedClaims", testConcurrentDecidedClaims},
}

// h is the harness one subtest works with.
type h struct {
	*testing.T
	ctx   context.Context
	clock *Clock
	s     ledger.Store
	// sealed: s encrypts what it stores (RunSealed), so stored sizes
	// (Removed.Bytes) are the ciphertext's, not the plaintext's.
	sealed bool
	// open opens another store on s's database; set only in RunShared.
	open func() (ledger.Store, error)
	// rewrite sets an operation's state column as given; set only in
	// RunOldRows.
	rewrite func(id, state string)
	// openAt opens another store on s's database for a worker whose clock
	// is skew off the ledger's; set only in RunClocks.
	openAt func(skew time.Duration) ledger.Store
}

// newOp returns an operation with every identity field set.
func newOp(id, task string) ledger.Operation {
	return ledger.Operation{
		ID:          id,
		Tenant:      "acme",
		TaskID:      task,
		TurnID:      task + "/t1",
		ToolCallID:  "call_" + id,
		Kind:        "github_create_pull_request",
		BusinessKey: "pr:create:acme/payments:agent/fix:main",
		RequestHash: "hash-" + id,
	}
}

func (h *h) claimAs(owner string, op ledger.Operation, lease time.Duration) ledger.ClaimResult {
	h.Helper()
	res, err := h.s.Claim(h.ctx, ledger.ClaimRequest{Op: op, Owner: owner, Lease: lease})
	if err != nil {
		h.Fatalf("Claim(%q) by %q: %v", op.ID, owner, err)
	}
	return res
}

// claim claims op for owner and expects to get it.
func (h *h) claim(owner string, op ledger.Operation) ledger.Operation {
	h.Helper()
	res := h.claimAs(owner, op, Lease)
	if res.Status != ledger.Claimed {
		h.Fatalf("Claim(%q) by %q: status %q, want %q (op %+v)", op.ID, owner, res.Status, ledger.Claimed, res.Op)
	}
	return res.Op
}

func (h *h) expectStatus(owner string, op ledger.Operation, want ledger.ClaimStatus) ledger.Operation {
	h.Helper()
	res := h.claimAs(owner, op, Lease)
	if res.Status != want {
		h.Fatalf("Claim(%q) by %q: status %q, want %q (op %+v)", op.ID, owner, res.Status, want, res.Op)
	}
	return res.Op
}

func (h *h) get(id string) ledger.Operation {
	h.Helper()
	op, err := h.s.Get(h.ctx, id)
	if err != nil {
		h.Fatalf("Get(%q): %v", id, err)
	}
	return op
}

func (h *h) markRunning(id string, fence int64) {
	h.Helper()
	h.markRunningWith(id, fence, nil)
}

func (h *h) markRunningWith(id string, fence int64, facts []byte) {
	h.Helper()
	if err := h.s.MarkRunning(h.ctx, id, fence, facts); err != nil {
		h.Fatalf("MarkRunning(%q, %d, %s): %v", id, fence, facts, err)
	}
}

// refusedFacts are the facts every MarkRunning the suite expects to be
// refused presents, so that unchanged proves a refused write recorded none
// of them.
var refusedFacts = []byte(`{"head_sha":"written by a refused MarkRunning"}`)

func (h *h) complete(c ledger.Completion) {
	h.Helper()
	if err := h.s.Complete(h.ctx, c); err != nil {
		h.Fatalf("Complete(%+v): %v", c, err)
	}
}

// succeed runs a claimed operation to SUCCEEDED.
func (h *h) succeed(op ledger.Operation, externalID string, result []byte) {
	h.Helper()
	h.markRunning(op.ID, op.Fence)
	h.complete(ledger.Completion{ID: op.ID, Fence: op.Fence, State: capstan.OutcomeSucceeded,
		ExternalID: externalID, Result: result})
}

// expectErrIs fails unless err wraps target and names the operation id.
func (h *h) expectErrIs(what string, err, target error, id string) {
	h.Helper()
	if !errors.Is(err, target) {
		h.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
	if id != "" && !strings.Contains(err.Error(), id) {
		h.Errorf("%s: error %q does not name operation %q", what, err, id)
	}
}

// unchanged fails unless the stored operation equals before.
func (h *h) unchanged(what string, before ledger.Operation) {
	h.Helper()
	if d := diff(h.get(before.ID), before); d != "" {
		h.Fatalf("%s changed the operation: %s", what, d)
	}
}

// diff describes how got differs from want, comparing times with Equal and
// byte slices by content; "" when they match.
func diff(got, want ledger.Operation) string {
	var d []string
	f := func(name string, g, w any) {
		if g != w {
			d = append(d, fmt.Sprintf("%s = %v, want %v", name, g, w))
		}
	}
	f("ID", got.ID, want.ID)
	f("Tenant", got.Tenant, want.Tenant)
	f("TaskID", got.TaskID, want.TaskID)
	f("TurnID", got.TurnID, want.TurnID)
	f("ToolCallID", got.ToolCallID, want.ToolCallID)
	f("Kind", got.Kind, want.Kind)
	f("BusinessKey", got.BusinessKey, want.BusinessKey)
	f("RequestHash", got.RequestHash, want.RequestHash)
	f("State", got.State, want.State)
	f("LeaseOwner", got.LeaseOwner, want.LeaseOwner)
	f("Fence", got.Fence, want.Fence)
	f("AttemptCount", got.AttemptCount, want.AttemptCount)
	f("ExternalID", got.ExternalID, want.ExternalID)
	f("Error", got.Error, want.Error)
	if !bytes.Equal(got.Result, want.Result) {
		d = append(d, fmt.Sprintf("Result = %q, want %q", got.Result, want.Result))
	}
	if !bytes.Equal(got.Facts, want.Facts) {
		d = append(d, fmt.Sprintf("Facts = %q, want %q", got.Facts, want.Facts))
	}
	for _, t := range []struct {
		name string
		g, w time.Time
	}{
		{"LeaseExpiresAt", got.LeaseExpiresAt, want.LeaseExpiresAt},
		{"CreatedAt", got.CreatedAt, want.CreatedAt},
		{"UpdatedAt", got.UpdatedAt, want.UpdatedAt},
	} {
		if !t.g.Equal(t.w) {
			d = append(d, fmt.Sprintf("%s = %v, want %v", t.name, t.g, t.w))
		}
	}
	return strings.Join(d, "; ")
}
