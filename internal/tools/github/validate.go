package github

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/tool"
)

// validator collects the first argument problem the schema cannot state as
// an error wrapping tool.ErrInvalidArguments that names the field and says
// why, in one sentence.
type validator struct {
	impl string
	err  error
}

func (v *validator) fail(format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf("%s: %w: %s", v.impl, tool.ErrInvalidArguments, fmt.Sprintf(format, args...))
	}
}

// decode unmarshals an arguments object the schema accepted into dst.
func (v *validator) decode(raw json.RawMessage, dst any) {
	if err := json.Unmarshal(raw, dst); err != nil {
		v.fail("the arguments do not decode (%v)", err) // the schema admits only what dst can hold
	}
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// repo checks a repository "owner/name" (ghref.ParseRepo).
func (v *validator) repo(s string) ghref.Repo {
	r, err := ghref.ParseRepo(s)
	var bad *ghref.RepoError
	if errors.As(err, &bad) {
		v.fail("%s", bad.Describe(fmt.Sprintf("field %q", "repo")))
	}
	return r
}

// branch checks a branch name (ghref.ValidBranch).
func (v *validator) branch(field, s string) string {
	switch {
	case s == "":
		v.fail("field %q must not be empty", field)
	case !ghref.ValidRefName(s):
		v.fail("field %q must be a valid git branch name, but %q is not", field, s)
	}
	return s
}

// newBranch checks the name of a branch to create (branch), which must not
// start with refs/ or heads/: git reads "refs/heads/x" and "heads/x" as the
// branch x, and so does the policy (docs/design.md §5.8), but the branch
// created would be named "refs/heads/x", one no rule decided on.
func (v *validator) newBranch(field, s string) string {
	if v.branch(field, s); strings.HasPrefix(s, "refs/") || strings.HasPrefix(s, "heads/") {
		v.fail("field %q is the name of the branch to create, without refs/ or heads/ (%q names a ref): give %q", field, s, branchOf(s))
	}
	return s
}

// branchOf is the branch name in a ref: s without refs/heads/ or heads/.
func branchOf(s string) string {
	if b, ok := strings.CutPrefix(s, "refs/heads/"); ok {
		return b
	}
	return strings.TrimPrefix(strings.TrimPrefix(s, "refs/"), "heads/")
}

// path checks a repository-relative file path.
func (v *validator) path(s string) string {
	if s == "" {
		v.fail("field %q must not be empty", "path")
		return s
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			v.fail("field %q must be a relative file path like \"docs/README.md\", but %q is not", "path", s)
			break
		}
	}
	return s
}

// nonBlank checks a text field that must say something.
func (v *validator) nonBlank(field, s string) string {
	if strings.TrimSpace(s) == "" {
		v.fail("field %q must not be empty", field)
	}
	return s
}
