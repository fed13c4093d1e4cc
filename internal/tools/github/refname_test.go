package github_test

import (
	"errors"
	"strings"
	"testing"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// github_create_branch refuses a branch name that starts with refs/ or
// heads/: the policy reads "refs/heads/capstan/x" as the branch capstan/x,
// but GitHub would create a branch named refs/heads/capstan/x, one no rule
// decided on. Nothing is sent for it.
func TestCreateBranchRefusesARefName(t *testing.T) {
	r := offlineTools(t)
	for _, tc := range []struct{ branch, give string }{
		{"refs/heads/capstan/x", `give "capstan/x"`},
		{"refs/tags/v1", `give "tags/v1"`},
		{"heads/capstan/x", `give "capstan/x"`},
	} {
		_, err := identify(t, r, githubtools.NameCreateBranch, `{"repo":"acme/app","branch":"`+tc.branch+`","from":"main"}`)
		if !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), `field "branch"`) || !strings.Contains(err.Error(), tc.give) {
			t.Errorf("branch %s: %v, want ErrInvalidArguments naming the field and saying %s", tc.branch, err, tc.give)
		}
	}
	if _, err := identify(t, r, githubtools.NameCreateBranch, `{"repo":"acme/app","branch":"capstan/refs/x","from":"refs/heads/main"}`); err != nil {
		t.Errorf("a branch with refs/ inside, from a ref: %v, want it accepted", err)
	}
}
