package capstantest

import (
	"slices"
	"testing"

	"github.com/capstanhq/capstan/internal/testenv"
)

// TestDevServerFlags: the dev server starts with the settings of
// deploy/temporal/dynamicconfig.yaml, as capstan's own tests' servers do.
func TestDevServerFlags(t *testing.T) {
	want, err := testenv.ServerSettings()
	if err != nil {
		t.Fatal(err)
	}
	got := devServerFlags()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("devServerFlags() = %q, want %q (deploy/temporal/dynamicconfig.yaml)", got, want)
	}
}
