package github

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/capstanhq/capstan/internal/tools"
	"github.com/capstanhq/capstan/internal/tools/ghref"
)

// validator collects the first argument problem the schema cannot state as
// an error wrapping tools.ErrInvalidArguments that names the field and says
// why, in one sentence.
type validator struct {
	tool string
	err  error
}

func (v *validator) fail(format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf("%s: %w: %s", v.tool, tools.ErrInvalidArguments, fmt.Sprintf(format, args...))
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
