package ghapp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// Transport returns an http.RoundTripper that sends each request through
// base with an installation token of the App as its bearer token: a token
// for the one repository the request's path names
// (".../repos/{owner}/{repo}/..."), of the configured installation or of
// that repository's. A request that names no repository, or for which no
// token can be had, is not sent: its error wraps ErrExchange and names no
// token. A 401 answer makes the Source drop the token it sent, so the next
// request gets a new one.
func (s *Source) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &appTransport{s: s, base: base}
}

type appTransport struct {
	s    *Source
	base http.RoundTripper
}

func (t *appTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	id := t.s.cfg.InstallationID
	owner, repo, ok := repoOf(req.URL)
	switch {
	case !ok && id == 0:
		closeBody(req)
		return nil, notSent(fmt.Errorf("%w: GitHub App %d: %s %s names no repository to find the installation of (set CAPSTAN_GITHUB_APP_INSTALLATION_ID)",
			ErrExchange, t.s.cfg.AppID, req.Method, req.URL.Path))
	case !ok:
		closeBody(req)
		return nil, notSent(fmt.Errorf("%w: GitHub App %d: %s %s names no repository, and the App's tokens are each requested for one repository",
			ErrExchange, t.s.cfg.AppID, req.Method, req.URL.Path))
	case id == 0:
		var err error
		if id, err = t.s.Installation(ctx, owner, repo); err != nil {
			closeBody(req)
			return nil, notSent(err)
		}
	}
	tok, err := t.s.Token(ctx, id, repo)
	if err != nil {
		closeBody(req)
		return nil, notSent(err)
	}
	r := req.Clone(ctx)
	r.Header.Set("Authorization", "Bearer "+tok)
	resp, err := t.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		t.s.forget(id, repo, tok)
	}
	return resp, err
}

// notSent marks err, the reason a request was not sent, as such for the
// tools' classification, except when the request's context ended: that
// keeps its own verdict (cancelled, or unknown for a deadline).
func notSent(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return tool.WithVerdict(err, tool.VerdictNotSent)
}

// repoOf finds "repos/{owner}/{repo}" in u's path, under whatever prefix
// the API is mounted at.
func repoOf(u *url.URL) (owner, repo string, ok bool) {
	_, rest, found := strings.Cut(u.Path, "/repos/")
	if !found {
		return "", "", false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// closeBody closes a request body a RoundTripper does not send, as its
// contract asks.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
