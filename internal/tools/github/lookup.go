package github

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/capstanhq/capstan/internal/tools"
)

// findable is a GitHub tool whose effect can be found again after the
// answer to its call was lost: a tools.Finder. Its lookup is the tool's
// find, over the arguments its own parser reads.
type findable[A any] struct{ *ghTool[A] }

// Effect parses s.Arguments as Execute does and returns the effect the call
// would leave. It does no I/O.
func (t findable[A]) Effect(s tools.Sent) (tools.Effect, error) {
	if t.c == nil {
		return nil, fmt.Errorf("%s: %w: no GitHub client", t.name, tools.ErrNotConfigured)
	}
	a, err := t.args(s.Arguments)
	if err != nil {
		return nil, err
	}
	return t.find(a, s)
}

// requireOperationID refuses a conditional or unsafe call without an
// operation id: its marker could never be reconciled.
func requireOperationID(tool, opID string) error {
	if opID == "" {
		return fmt.Errorf("%s: %w: no operation id, so the effect could not be reconciled", tool, tools.ErrRefused)
	}
	return nil
}

// Listings are read in pages of perPage, at most maxPages of them: a list
// longer than that cannot be searched, and the question counts as not asked.
const (
	perPage  = 100
	maxPages = 50
)

// notFound reports GitHub's own 404. Anything else without an answer — a
// rate limit, a 5xx, a dropped connection, go-github refusing to send while
// a rate limit lasts — is not a 404.
func notFound(err error) bool { return HTTPStatus(err) == http.StatusNotFound }

// anyMarker starts every operation's marker: a body that holds it, but not
// this operation's marker, is another operation's.
var anyMarker = strings.TrimSuffix(Marker(""), " -->")
