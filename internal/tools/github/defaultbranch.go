package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/tools/ghref"
)

// RepoBranches reads the default branch of a repository (go-github
// Repositories.Get) and keeps it config.DefaultBranchTTL: the policy's
// default/base-branch rule refuses a write to it as to the task's base
// (docs/design.md §5.8). A repository's default branch rarely changes; a
// change is seen within config.DefaultBranchTTL, not only by a worker started
// after it.
type RepoBranches struct {
	client *gogithub.Client
	// Now is the clock the ages of kept branches are read on: time.Now,
	// unless set (a test's clock) before the first call.
	Now   func() time.Time
	mu    sync.Mutex
	known map[string]knownBranch // by lower-case owner/name
}

// knownBranch is a default branch as read at a time.
type knownBranch struct {
	name string
	read time.Time
}

// NewRepoBranches reads default branches through c.
func NewRepoBranches(c *gogithub.Client) *RepoBranches {
	return &RepoBranches{client: c, Now: time.Now, known: map[string]knownBranch{}}
}

// DefaultBranch is repo's ("owner/name") default branch: the one read
// less than config.DefaultBranchTTL ago, or read now; "" when GitHub does not
// know the repository (the write will fail on its own, and nothing is
// kept), an error when it could not be read, which is not remembered.
func (d *RepoBranches) DefaultBranch(ctx context.Context, repo string) (string, error) {
	key := strings.ToLower(repo)
	d.mu.Lock()
	k, ok := d.known[key]
	d.mu.Unlock()
	if ok && d.Now().Sub(k.read) < config.DefaultBranchTTL {
		return k.name, nil
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
	b := got.GetDefaultBranch()
	d.mu.Lock()
	d.known[key] = knownBranch{name: b, read: d.Now()}
	d.mu.Unlock()
	return b, nil
}
