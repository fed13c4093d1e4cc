package contract_test

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/contract"
)

func TestReconcileProgressLine(t *testing.T) {
	by := time.Date(2026, 12, 2, 14, 2, 10, 0, time.UTC)
	for _, tc := range []struct {
		p    contract.ReconcileProgress
		want string
	}{
		{contract.ReconcileProgress{Asked: 2}, ""},
		{contract.ReconcileProgress{LookingFor: "pull request capstan/x → main", AbsentBy: by},
			"looking for pull request capstan/x → main; absent if not seen by 14:02:10 UTC"},
		{contract.ReconcileProgress{LookingFor: "a comment", AbsentBy: by.In(time.FixedZone("X", 3600)), Asked: 3, Waiting: "Retry-After 30s"},
			"looking for a comment; absent if not seen by 14:02:10 UTC (asked 3 times); waiting: Retry-After 30s"},
	} {
		if got := tc.p.Line(); got != tc.want {
			t.Errorf("Line() = %q, want %q", got, tc.want)
		}
	}
}
