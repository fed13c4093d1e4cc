package github

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	gogithub "github.com/google/go-github/v62/github"
)

// Self names the GitHub account capstan writes as. A lookup believes a
// marker only in what that account wrote: anyone who can comment on an
// issue or open a pull request can copy a marker into their own text, and
// must not thereby make capstan think its effect exists.
type Self interface {
	// Login returns the account's login. An error means it could not be
	// learnt now; the lookup asking then counts as not asked.
	Login(ctx context.Context) (string, error)
}

// FixedLogin is a Self known without asking: for a GitHub App, whose
// installation token cannot call GET /user, its bot login ("name[bot]").
type FixedLogin string

// Login returns l.
func (l FixedLogin) Login(context.Context) (string, error) {
	if l == "" {
		return "", errors.New("github: no login configured")
	}
	return string(l), nil
}

// AuthenticatedUser is the Self of c's token: the login GET /user answers,
// asked on first use and then kept for the life of the value (one per
// worker), since a token's user does not change. A failed question is not
// kept: the next Login asks again.
func AuthenticatedUser(c *gogithub.Client) Self { return &authenticatedUser{c: c} }

type authenticatedUser struct {
	c     *gogithub.Client
	mu    sync.Mutex // held while asking, so concurrent lookups ask once
	login string
}

func (a *authenticatedUser) Login(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.login != "" {
		return a.login, nil
	}
	if a.c == nil {
		return "", errors.New("github: no client to ask who the token's user is")
	}
	u, _, err := a.c.Users.Get(ctx, "")
	if err != nil {
		return "", fmt.Errorf("ask GitHub who the token's user is (GET /user): %w", err)
	}
	if u.GetLogin() == "" {
		return "", errors.New("GitHub's GET /user answered no login")
	}
	a.login = u.GetLogin()
	return a.login, nil
}

// sameLogin compares GitHub logins, which are case-insensitive.
func sameLogin(a, b string) bool { return strings.EqualFold(a, b) }
