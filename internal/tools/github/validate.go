package github

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/capstanhq/capstan/internal/tools"
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

var (
	ownerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}$`)
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	shaRE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// repoName is a validated "owner/name".
type repoName struct{ owner, name string }

// key is the case-folded form used in business keys and effects.
func (r repoName) key() string    { return strings.ToLower(r.owner + "/" + r.name) }
func (r repoName) String() string { return r.owner + "/" + r.name }

func (v *validator) repo(s string) repoName {
	const field = "repo"
	owner, name, _ := strings.Cut(s, "/")
	switch {
	case s == "":
		v.fail("field %q is required and must be \"owner/name\"", field)
	case !strings.Contains(s, "/"):
		v.fail("field %q must be \"owner/name\", but %q has no slash", field, s)
	case strings.Count(s, "/") > 1:
		v.fail("field %q must be \"owner/name\", but %q has more than one slash", field, s)
	case owner == "" || name == "":
		v.fail("field %q must be \"owner/name\", but %q has an empty part", field, s)
	case !ownerRE.MatchString(owner) || !nameRE.MatchString(name) || name == "." || name == "..":
		v.fail("field %q must be \"owner/name\" in characters GitHub allows, but %q has others", field, s)
	}
	return repoName{owner: owner, name: name}
}

// ValidRepo reports whether s is a repository "owner/name" the tools accept,
// so the starter can refuse one before a task starts and spends turns on it.
func ValidRepo(s string) bool {
	v := validator{tool: "repo"}
	v.repo(s)
	return v.err == nil
}

// ValidBranchName reports whether s is a branch name the tools accept.
func ValidBranchName(s string) bool { return s != "" && validRefName(s) }

// branch checks a branch name against the rules of git check-ref-format that
// a model is likely to break.
func (v *validator) branch(field, s string) string {
	switch {
	case s == "":
		v.fail("field %q must not be empty", field)
	case !validRefName(s):
		v.fail("field %q must be a valid git branch name, but %q is not", field, s)
	}
	return s
}

func validRefName(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	return !strings.Contains(s, "..") && !strings.Contains(s, "//") && !strings.Contains(s, "@{") &&
		!strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "-") && !strings.HasSuffix(s, "/") &&
		!strings.HasSuffix(s, ".") && !strings.HasSuffix(s, ".lock") && s != "@"
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
