package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools/ghref"
)

// RepoBranches reads the default branch of a repository (go-github
// Repositories.Get), once per repository for the life of the worker: the
// policy's default/base-branch rule refuses a write to it as to the task's
// base (docs/design.md §5.8). A repository's default branch rarely
// changes; a worker started after a change reads the new one.
type RepoBranches struct {
	client *gogithub.Client
	mu     sync.Mutex
	known  map[string]string // by lower-case owner/name
}

// NewRepoBranches reads default branches through c.
func NewRepoBranches(c *gogithub.Client) *RepoBranches {
	return &RepoBranches{client: c, known: map[string]string{}}
}

// DefaultBranch is repo's ("owner/name") default branch: "" when GitHub
// does not know the repository (the write will fail on its own), an error
// when it could not be read, which is not remembered.
func (d *RepoBranches) DefaultBranch(ctx context.Context, repo string) (string, error) {
	key := strings.ToLower(repo)
	d.mu.Lock()
	b, ok := d.known[key]
	d.mu.Unlock()
	if ok {
		return b, nil
	}
	r, err := ghref.ParseRepo(repo)
	if err != nil {
		return "", err
	}
	got, resp, err := d.client.Repositories.Get(ctx, r.Owner, r.Name)
	var ghErr *gogithub.ErrorResponse
	if errors.As(err, &ghErr) && resp != nil && resp.StatusCode == http.StatusNotFound {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the default branch of %s: %w", repo, err)
	}
	b = got.GetDefaultBranch()
	d.mu.Lock()
	d.known[key] = b
	d.mu.Unlock()
	return b, nil
}
