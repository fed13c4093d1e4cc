package workerapp

import (
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
)

// A namespace is taken for not visible only on the server's own words —
// its NamespaceNotFound (as the dev server answers a listing of search
// attributes, recorded), or that answer inside the Unavailable in which
// SQL visibility's listing wraps it — and only for the namespace asked
// about.
func TestNamespaceNotFoundReadsTheServersAnswer(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{serviceerror.NewNamespaceNotFound("late"), true},
		{fmt.Errorf("list: %w", serviceerror.NewNamespaceNotFound("late")), true},
		{serviceerror.NewUnavailable("Unable to get late namespace info with error: Namespace late is not found."), true},
		{serviceerror.NewUnavailable("Unable to get other namespace info with error: Namespace other is not found."), false},
		{serviceerror.NewUnavailable("connection refused"), false},
		{serviceerror.NewPermissionDenied("Request unauthorized.", ""), false},
	} {
		if got := namespaceNotFound(c.err, "late"); got != c.want {
			t.Errorf("namespaceNotFound(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
