// Package ghapp lets a worker act on GitHub as a GitHub App: it signs the
// App's JWT with its private key, exchanges it through go-github's Apps API
// for installation tokens, keeps each token and refreshes it before it
// expires, and puts it on every request of the worker's GitHub client (an
// http.RoundTripper). docs/design.md §8 says where tokens live.
//
// Tokens are bounded by construction: each is requested for the one
// repository the requests it authorises act on, and with only the
// permissions capstan's GitHub tools need (Config.Permissions), so a token
// can reach no other repository of the installation and do nothing the
// tools do not.
//
// Guarantees: a token lives only in a Source's memory and in the
// Authorization header of the requests it authorises; it is never in an
// error, a log line, or anything the worker returns to a workflow. A
// Source is safe for concurrent use, and concurrent callers that find a
// token missing or due for refresh share one exchange.
package ghapp

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	gogithub "github.com/google/go-github/v62/github"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// ErrExchange marks a failed exchange of the App's JWT for an installation
// token (or of a failed look-up of a repository's installation): the
// request that needed the token was not sent.
var ErrExchange = errors.New("GitHub App: no installation token")

// Config says which App a Source acts as and how it reaches GitHub.
type Config struct {
	// AppID is the App's numeric id (CAPSTAN_GITHUB_APP_ID).
	AppID int64
	// Key is the App's private key; it signs the JWTs.
	Key *rsa.PrivateKey
	// InstallationID, when not 0, is the installation every request uses;
	// 0 looks a repository's installation up (GET /repos/{o}/{r}/installation)
	// on its first request, and keeps it.
	InstallationID int64
	// BaseURL is the REST API base, as githubtools.NewClient takes it.
	BaseURL string
	// Base sends the Source's own requests (JWT calls); nil is
	// http.DefaultTransport. The worker gives it its calltimeout.Transport.
	Base http.RoundTripper
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Permissions are what every installation token is requested with;
	// nil is what capstan's GitHub tools need
	// (githubtools.AppPermissions of githubtools.ToolNames).
	Permissions *gogithub.InstallationPermissions
}

// Source holds an App's installation tokens.
type Source struct {
	cfg Config
	api *gogithub.Client // authenticated with a fresh JWT per request

	mu      sync.Mutex
	tokens  map[tokenKey]*cached // by installation and repository
	install map[string]int64     // lower-case "owner/repo" -> installation id
	login   string               // the bot's login, once known
}

// tokenKey names the tokens of one repository (its lower-case name) in one
// installation: each is requested for that repository alone.
type tokenKey struct {
	installation int64
	repo         string
}

// cached is one installation's token, and the exchange getting its next one.
type cached struct {
	token           string
	issued, expires time.Time
	flight          *flight // the exchange in flight; nil when none
}

// flight is one exchange: token or err is set before done is closed.
type flight struct {
	done  chan struct{}
	token string
	err   error
}

// New returns a Source for cfg.
func New(cfg Config) (*Source, error) {
	if cfg.AppID <= 0 || cfg.Key == nil {
		return nil, errors.New("ghapp: an App id and a private key are needed")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Permissions == nil {
		cfg.Permissions = githubtools.AppPermissions(githubtools.ToolNames()...)
	}
	s := &Source{cfg: cfg, tokens: map[tokenKey]*cached{}, install: map[string]int64{}}
	base := cfg.Base
	if base == nil {
		base = http.DefaultTransport
	}
	api, err := githubtools.NewClient(cfg.BaseURL, "", &http.Client{Transport: &jwtTransport{s: s, base: base}})
	if err != nil {
		return nil, err
	}
	s.api = api
	return s, nil
}

// InstallationID is the configured installation; 0 when each repository's
// is looked up.
func (s *Source) InstallationID() int64 { return s.cfg.InstallationID }

// JWT returns a fresh App JWT: RS256, issued 60 s in the past (GitHub's
// advice against clock drift), expiring 9 minutes from now (GitHub takes
// at most 10 ahead), the App id as issuer. It is signed per call and kept
// nowhere.
func (s *Source) JWT() (string, error) {
	now := s.cfg.Now()
	claims := jwt.RegisteredClaims{
		Issuer:    fmt.Sprint(s.cfg.AppID),
		IssuedAt:  jwt.NewNumericDate(now.Add(-60 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute)),
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(s.cfg.Key)
	if err != nil {
		return "", fmt.Errorf("GitHub App %d: sign its JWT: %w", s.cfg.AppID, err)
	}
	return signed, nil
}

// jwtTransport authorises the Source's own API calls with a fresh JWT.
type jwtTransport struct {
	s    *Source
	base http.RoundTripper
}

func (t *jwtTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	signed, err := t.s.JWT()
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+signed)
	return t.base.RoundTrip(r)
}

// Login is the App's bot account, "<slug>[bot]", the author of everything
// the App writes: asked with the JWT (GET /app) on first use, then kept. A
// failed question is not kept. It makes a Source a githubtools.Self.
func (s *Source) Login(ctx context.Context) (string, error) {
	s.mu.Lock()
	login := s.login
	s.mu.Unlock()
	if login != "" {
		return login, nil
	}
	app, _, err := s.api.Apps.Get(ctx, "")
	if err != nil {
		return "", fmt.Errorf("GitHub App %d: GET /app with its JWT: %w", s.cfg.AppID, err)
	}
	if app.GetSlug() == "" {
		return "", fmt.Errorf("GitHub App %d: GET /app answered no slug", s.cfg.AppID)
	}
	s.mu.Lock()
	s.login = app.GetSlug() + "[bot]"
	login = s.login
	s.mu.Unlock()
	return login, nil
}

// Installation returns the installation of repository owner/repo: the
// configured one, or the one GitHub names for it, looked up once.
func (s *Source) Installation(ctx context.Context, owner, repo string) (int64, error) {
	if s.cfg.InstallationID != 0 {
		return s.cfg.InstallationID, nil
	}
	key := strings.ToLower(owner + "/" + repo)
	s.mu.Lock()
	id, ok := s.install[key]
	s.mu.Unlock()
	if ok {
		return id, nil
	}
	inst, _, err := s.api.Apps.FindRepositoryInstallation(ctx, owner, repo)
	if err != nil {
		return 0, fmt.Errorf("%w: GitHub App %d: find its installation on %s/%s: %w", ErrExchange, s.cfg.AppID, owner, repo, err)
	}
	if inst.GetID() == 0 {
		return 0, fmt.Errorf("%w: GitHub App %d: GitHub named no installation on %s/%s", ErrExchange, s.cfg.AppID, owner, repo)
	}
	s.mu.Lock()
	s.install[key] = inst.GetID()
	s.mu.Unlock()
	return inst.GetID(), nil
}

// CheckInstallation asks GitHub, with the App's JWT, for installation id
// (GET /app/installations/{id}): an installation the App does not have,
// or a suspended one, is an ErrExchange error. No token is requested: the
// worker's checks at startup mint none.
func (s *Source) CheckInstallation(ctx context.Context, id int64) error {
	inst, _, err := s.api.Apps.GetInstallation(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("%w: GitHub App %d: read its installation %d: %w", ErrExchange, s.cfg.AppID, id, err)
	case inst.SuspendedAt != nil:
		return fmt.Errorf("%w: GitHub App %d: its installation %d is suspended", ErrExchange, s.cfg.AppID, id)
	}
	return nil
}

// Token returns a token of installation id for repository repo (its name,
// without the owner, which the installation is of) with enough life left:
// the kept one, or a new one when none is kept or the kept one is due
// (refreshDue). A new one is requested for repo alone, with
// Config.Permissions. Concurrent callers share one exchange; a caller
// whose ctx ends stops waiting, and the exchange goes on for the others. A
// failed exchange is an ErrExchange error for each of its waiters, and the
// next call tries again.
func (s *Source) Token(ctx context.Context, id int64, repo string) (string, error) {
	if repo == "" {
		return "", fmt.Errorf("%w: GitHub App %d: a token of installation %d is requested for one repository, and none was named", ErrExchange, s.cfg.AppID, id)
	}
	key := tokenKey{installation: id, repo: strings.ToLower(repo)}
	s.mu.Lock()
	c := s.tokens[key]
	if c == nil {
		c = &cached{}
		s.tokens[key] = c
	}
	if c.token != "" && !refreshDue(s.cfg.Now(), c.issued, c.expires) {
		tok := c.token
		s.mu.Unlock()
		return tok, nil
	}
	f := c.flight
	if f == nil {
		f = &flight{done: make(chan struct{})}
		c.flight = f
		go s.exchange(ctx, id, repo, c, f)
	}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
		return "", fmt.Errorf("%w: GitHub App %d: waiting for a token of installation %d for %s: %w", ErrExchange, s.cfg.AppID, id, repo, ctx.Err())
	case <-f.done:
	}
	return f.token, f.err
}

// exchange gets installation id a new token for repo, with the configured
// permissions, and ends flight f. It runs with the first caller's values
// but not its cancellation, so a caller that gives up does not fail the
// others; the Base transport bounds it in time.
func (s *Source) exchange(ctx context.Context, id int64, repo string, c *cached, f *flight) {
	tok, _, err := s.api.Apps.CreateInstallationToken(context.WithoutCancel(ctx), id,
		&gogithub.InstallationTokenOptions{Repositories: []string{repo}, Permissions: s.cfg.Permissions})
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(f.done)
	c.flight = nil
	switch {
	case err != nil:
		f.err = fmt.Errorf("%w: GitHub App %d: exchange its JWT for a token of installation %d for %s: %w", ErrExchange, s.cfg.AppID, id, repo, err)
	case tok.GetToken() == "" || !tok.GetExpiresAt().After(now):
		f.err = fmt.Errorf("%w: GitHub App %d: installation %d answered a token for %s that is empty or already expired", ErrExchange, s.cfg.AppID, id, repo)
	default:
		c.token, c.issued, c.expires = tok.GetToken(), now, tok.GetExpiresAt().Time
		f.token = c.token
	}
}

// forget drops installation id's kept token for repo if it is still tok:
// GitHub refused it, so the next request gets a new one.
func (s *Source) forget(id int64, repo, tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.tokens[tokenKey{installation: id, repo: strings.ToLower(repo)}]; c != nil && c.token == tok {
		c.token = ""
	}
}

// refreshDue reports whether a token issued at issued and expiring at
// expires is to be replaced at now: when less than a minute, or less than a
// quarter of its life, is left, whichever is shorter (a real installation
// token lives an hour: refreshed in its last minute; the sandbox's 30 s
// ones in their last 7.5 s).
func refreshDue(now, issued, expires time.Time) bool {
	margin := min(time.Minute, expires.Sub(issued)/4)
	return expires.Sub(now) < margin
}
