package reconcilers

import (
	"net/http"

	"github.com/google/go-github/v62/github"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// GitHub asks GitHub, through the same go-github client the tools use.
type GitHub struct{ c *github.Client }

// NewGitHub returns the GitHub reconcilers over c.
func NewGitHub(c *github.Client) *GitHub { return &GitHub{c: c} }

// Listings are read in pages of perPage, at most maxPages of them: a list
// longer than that cannot be searched, and the question counts as not asked.
const (
	perPage  = 100
	maxPages = 50
)

// notFound reports GitHub's own 404. Anything else without an answer — a
// rate limit, a 5xx, a dropped connection, go-github refusing to send while
// a rate limit lasts — is not a 404.
func notFound(err error) bool { return githubtools.HTTPStatus(err) == http.StatusNotFound }
