package contract_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/policy"
)

// throughTemporal is err as the workflow gets it: encoded by the SDK's own
// failure converter, as a worker sends it, and decoded again.
func throughTemporal(err error) error {
	fc := temporal.GetDefaultFailureConverter()
	return fc.FailureToError(fc.ErrorToFailure(err))
}

// An application error wrapped for context keeps its type, retryability,
// delay and details across the activity boundary only through AtBoundary.
func TestWrappedApplicationErrorKeepsItsTypeAtTheBoundary(t *testing.T) {
	t.Parallel()
	conflict := temporal.NewNonRetryableApplicationError("other request hash", contract.ErrTypeOperationConflict, nil)
	wrapped := fmt.Errorf("%w; and handing operation op-1 back failed: %w", conflict, errors.New("ledger: closed"))

	// Without the boundary the workflow cannot tell the type, and Temporal
	// would retry a non-retryable error.
	raw := throughTemporal(wrapped)
	if got := contract.ErrorTypeOf(raw); got != "" {
		t.Fatalf("without AtBoundary the type survived (%q): the SDK changed, and AtBoundary may be unneeded", got)
	}

	got := throughTemporal(contract.AtBoundary(wrapped))
	if !contract.IsOperationConflict(got) {
		t.Errorf("type after the boundary = %q, want %s", contract.ErrorTypeOf(got), contract.ErrTypeOperationConflict)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(got, &appErr) || !appErr.NonRetryable() {
		t.Errorf("after the boundary: %v; want a non-retryable application error", got)
	}
	if d := contract.Describe(got); !strings.Contains(d, "handing operation op-1 back failed") || !strings.Contains(d, "other request hash") {
		t.Errorf("Describe = %q; want both the cause and the context", d)
	}

	wait := contract.BreakerWait{Breaker: "github", State: "open", Wait: 7 * time.Second}
	open := temporal.NewApplicationErrorWithOptions("breaker open", contract.ErrTypeBreakerOpen,
		temporal.ApplicationErrorOptions{NextRetryDelay: wait.Wait, Details: []any{wait}})
	gotWait, ok := contract.BreakerWaitOf(throughTemporal(contract.AtBoundary(fmt.Errorf("tool x: %w", open))))
	if !ok || gotWait != wait {
		t.Errorf("BreakerWait after the boundary = %+v, %t; want %+v", gotWait, ok, wait)
	}
	report := contract.AttemptReport{AttemptID: "t/t1/a1", Outcome: model.OutcomeOverloaded, HTTPStatus: 529}
	attempt := temporal.NewNonRetryableApplicationError("overloaded", contract.ErrTypeModelAttempt, nil, report)
	if gotReport, ok := contract.AttemptReportOf(throughTemporal(contract.AtBoundary(fmt.Errorf("turn t1: %w", attempt)))); !ok || gotReport != report {
		t.Errorf("AttemptReport after the boundary = %+v, %t; want %+v", gotReport, ok, report)
	}
}

func TestAtBoundaryLeavesOtherErrorsAlone(t *testing.T) {
	t.Parallel()
	top := temporal.NewApplicationError("held", contract.ErrTypeOperationInProgress)
	plain := errors.New("plain")
	for _, err := range []error{nil, plain, top} {
		if got := contract.AtBoundary(err); got != err {
			t.Errorf("AtBoundary(%v) = %v; want it unchanged", err, got)
		}
	}
}

// The lifted error says what the wrapping said, its type and cause once.
func TestAtBoundaryMessageNamesTheTypeOnce(t *testing.T) {
	t.Parallel()
	conflict := temporal.NewNonRetryableApplicationError("other request hash", contract.ErrTypeOperationConflict, errors.New("hash 1 ≠ hash 2"))
	got := contract.AtBoundary(fmt.Errorf("%w; and handing operation op-1 back failed: ledger closed", conflict)).Error()
	want := "other request hash; and handing operation op-1 back failed: ledger closed (type: OperationConflict, retryable: false): hash 1 ≠ hash 2"
	if got != want {
		t.Errorf("message\n got %q\nwant %q", got, want)
	}
}

// A context that names its policy file by reference carries a placeholder
// text that no policy file can be: a worker that predates references fails
// to compile it (policy.Parse refuses its only key) rather than reading ""
// as "no file" and deciding with the defaults alone.
func TestPolicyPlaceholderIsNoText(t *testing.T) {
	t.Parallel()
	ref := "sha256:" + strings.Repeat("ab", 32)
	tp := &contract.TaskPolicy{File: "policy.yaml", Source: contract.PolicyPlaceholder(ref), SourceRef: ref}
	if contract.HasPolicyText(tp) {
		t.Errorf("HasPolicyText(%q) = true, want false", tp.Source)
	}
	if !contract.HasPolicyText(&contract.TaskPolicy{Source: "rules: []\n"}) || contract.HasPolicyText(&contract.TaskPolicy{}) || contract.HasPolicyText(nil) {
		t.Error("HasPolicyText misreads a real text, an empty one or none")
	}
	if _, err := policy.Parse("policy.yaml", []byte(tp.Source)); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Errorf("policy.Parse(placeholder) = %v, want the unknown-key refusal an older worker gives", err)
	}
}
