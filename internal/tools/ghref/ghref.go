// Package ghref reads and writes the names capstan gives to things on
// GitHub: a repository "owner/name", an issue or pull request
// "owner/name#N", a branch name, and the arguments of the comment a task's
// final answer is delivered as. It is the one parser of those names: the
// GitHub tools validate their arguments with it, and the starter its flags,
// so a name the starter accepts is one the tools accept.
//
// It imports only the standard library, so that the starter and the
// workflow can use it without linking a GitHub client.
package ghref

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Repo is a repository "owner/name" in the characters GitHub allows.
type Repo struct{ Owner, Name string }

// String is "owner/name" as it was given.
func (r Repo) String() string { return r.Owner + "/" + r.Name }

// Key is the case-folded "owner/name": GitHub's owner and repository names
// are case-insensitive, so "Acme/App" and "acme/app" are one repository,
// and business keys and effects use this form.
func (r Repo) Key() string { return strings.ToLower(r.String()) }

var (
	ownerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}$`)
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
)

// ValidOwner reports whether s is a user or organisation name GitHub
// allows: the owner of a repository, or of the fork a pull request's head
// is in ("owner:branch").
func ValidOwner(s string) bool { return ownerRE.MatchString(s) }

// RepoError says why a string is not a repository.
type RepoError struct {
	Value string
	// why completes "<subject> must be "owner/name"…".
	why string
}

// Describe says in one sentence why e.Value is not a repository, with
// subject (such as `field "repo"`) as the sentence's subject.
func (e *RepoError) Describe(subject string) string { return subject + " " + e.why }

func (e *RepoError) Error() string { return e.Describe("a repository") }

// ParseRepo reads "owner/name". Its error is a *RepoError.
func ParseRepo(s string) (Repo, error) {
	owner, name, _ := strings.Cut(s, "/")
	var why string
	switch {
	case s == "":
		why = `is required and must be "owner/name"`
	case !strings.Contains(s, "/"):
		why = fmt.Sprintf(`must be "owner/name", but %q has no slash`, s)
	case strings.Count(s, "/") > 1:
		why = fmt.Sprintf(`must be "owner/name", but %q has more than one slash`, s)
	case owner == "" || name == "":
		why = fmt.Sprintf(`must be "owner/name", but %q has an empty part`, s)
	case !ValidOwner(owner) || !nameRE.MatchString(name) || name == "." || name == "..":
		why = fmt.Sprintf(`must be "owner/name" in characters GitHub allows, but %q has others`, s)
	default:
		return Repo{Owner: owner, Name: name}, nil
	}
	return Repo{}, &RepoError{Value: s, why: why}
}

// Issue is an issue or pull request of a repository: "owner/name#N".
type Issue struct {
	Repo   Repo
	Number int
}

func (i Issue) String() string { return i.Repo.String() + "#" + strconv.Itoa(i.Number) }

// ParseIssue reads "owner/name#N", N a positive issue or pull request
// number.
func ParseIssue(s string) (Issue, error) {
	repo, num, ok := strings.Cut(s, "#")
	if !ok {
		return Issue{}, fmt.Errorf(`%q is not "owner/name#N": it has no "#"`, s)
	}
	r, err := ParseRepo(repo)
	if err != nil {
		return Issue{}, fmt.Errorf(`%q is not "owner/name#N": %w`, s, err)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return Issue{}, fmt.Errorf(`%q is not "owner/name#N": %q is not an issue or pull request number`, s, num)
	}
	return Issue{Repo: r, Number: n}, nil
}

// ValidBranch reports whether s is a branch name: not empty, and within the
// rules of git check-ref-format that a model or a person is likely to
// break.
func ValidBranch(s string) bool { return s != "" && ValidRefName(s) }

// ValidRefName reports whether s keeps the rules of git check-ref-format
// that a model or a person is likely to break (no control characters,
// spaces, "~^:?*[\", "..", "//", "@{", and so on). An empty s keeps them.
func ValidRefName(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	return !strings.Contains(s, "..") && !strings.Contains(s, "//") && !strings.Contains(s, "@{") &&
		!strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "-") && !strings.HasSuffix(s, "/") &&
		!strings.HasSuffix(s, ".") && !strings.HasSuffix(s, ".lock") && s != "@"
}

// CommentArguments are the arguments of the github_comment tool that post
// body on issue or pull request number of repo: how a task's final answer is
// delivered as a comment. The workflow names them by their ledger reference
// and the delivery stores them, so both must build them here: the bytes,
// and so the reference, are then the same. repo is used as given.
func CommentArguments(repo string, number int, body string) []byte {
	b, _ := json.Marshal(struct {
		Repo   string `json:"repo"`
		Number int    `json:"number"`
		Body   string `json:"body"`
	}{repo, number, body}) // cannot fail: strings and an int
	return b
}
