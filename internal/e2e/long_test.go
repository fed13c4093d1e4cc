package e2e

import (
	"os"
	"testing"
)

// requireLong skips a test that runs for minutes (a game day, a rolling
// deploy, a fairness run, a load) unless CAPSTAN_LONG=1, which `make
// test-long` sets. Such tests are named TestLong… so that target can select
// them alone; `make test` keeps its budget and still compiles them.
func requireLong(t *testing.T) {
	t.Helper()
	if os.Getenv("CAPSTAN_LONG") != "1" {
		t.Skip("a long run: `make test-long` runs it (CAPSTAN_LONG=1)")
	}
}
