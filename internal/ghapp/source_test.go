package ghapp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// appServer answers the Apps API: it checks the JWT against key and
// hands out numbered tokens living `life`; hold, when not nil, holds each
// exchange until it is closed; fail makes exchanges answer 401.
type appServer struct {
	t         *testing.T
	key       *rsa.PrivateKey
	clock     *fakeClock
	life      time.Duration
	hold      chan struct{}
	fail      atomic.Bool
	exchanges atomic.Int64
	lookups   atomic.Int64 // GET /repos/{o}/{r}/installation
	seen      sync.Map     // Authorization headers of repository calls
}

func (a *appServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case strings.HasPrefix(r.URL.Path, "/app/installations/"):
		if _, err := jwt.Parse(auth, func(*jwt.Token) (any, error) { return &a.key.PublicKey, nil },
			jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer("42"), jwt.WithTimeFunc(a.clock.Now)); err != nil {
			http.Error(w, `{"message":"A JSON web token could not be decoded"}`, http.StatusUnauthorized)
			return
		}
		if a.hold != nil {
			<-a.hold
		}
		if a.fail.Load() {
			http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
			return
		}
		n := a.exchanges.Add(1)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"token": fmt.Sprintf("ghs_secret%d", n),
			"expires_at": a.clock.Now().Add(a.life).UTC().Format(time.RFC3339)})
	case strings.HasPrefix(r.URL.Path, "/repos/") && strings.HasSuffix(r.URL.Path, "/installation"):
		if _, err := jwt.Parse(auth, func(*jwt.Token) (any, error) { return &a.key.PublicKey, nil },
			jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(a.clock.Now)); err != nil {
			http.Error(w, `{"message":"A JSON web token could not be decoded"}`, http.StatusUnauthorized)
			return
		}
		a.lookups.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 7})
	case strings.HasPrefix(r.URL.Path, "/repos/"):
		a.seen.Store(auth, true)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 1})
	default:
		http.NotFound(w, r)
	}
}

func newAppServer(t *testing.T, life time.Duration) (*appServer, *Source) {
	return newAppServerFor(t, life, 7)
}

func newAppServerFor(t *testing.T, life time.Duration, installation int64) (*appServer, *Source) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Now().Truncate(time.Second)}
	a := &appServer{t: t, key: key, clock: clock, life: life}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	s, err := New(Config{AppID: 42, Key: key, InstallationID: installation, BaseURL: srv.URL, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return a, s
}

// TestTokenIsKeptThenRefreshedBeforeExpiry: a 30 s token is used while more
// than a quarter of its life is left, and replaced before it expires.
func TestTokenIsKeptThenRefreshedBeforeExpiry(t *testing.T) {
	a, s := newAppServer(t, 30*time.Second)
	ctx := context.Background()
	first, err := s.Token(ctx, 7, "r")
	if err != nil {
		t.Fatal(err)
	}
	a.clock.Add(20 * time.Second) // 10 s left of 30: kept
	if again, _ := s.Token(ctx, 7, "r"); again != first || a.exchanges.Load() != 1 {
		t.Fatalf("with 10 s of 30 left: token %q after %d exchanges, want %q kept after 1", again, a.exchanges.Load(), first)
	}
	a.clock.Add(3 * time.Second) // 7 s left, under a quarter: refreshed
	second, err := s.Token(ctx, 7, "r")
	if err != nil || second == first || a.exchanges.Load() != 2 {
		t.Fatalf("with 7 s of 30 left: token %q (err %v) after %d exchanges, want a new one after 2", second, err, a.exchanges.Load())
	}
	now := a.clock.Now()
	if !refreshDue(now, now.Add(-59*time.Minute-1*time.Second), now.Add(59*time.Second)) ||
		refreshDue(now, now.Add(-58*time.Minute), now.Add(2*time.Minute)) {
		t.Error("an hour's token is refreshed in its last minute, not before")
	}
}

// TestConcurrentCallersShareOneExchange: 50 callers asking at once while no
// token is kept wait for one exchange and all get its token.
func TestConcurrentCallersShareOneExchange(t *testing.T) {
	a, s := newAppServer(t, time.Hour)
	a.hold = make(chan struct{})
	var wg sync.WaitGroup
	got := make([]string, 50)
	errs := make([]error, 50)
	for i := range got {
		wg.Go(func() { got[i], errs[i] = s.Token(context.Background(), 7, "r") })
	}
	// Release the exchange once it is in flight: a caller that asks after
	// it ended finds its token kept, and none starts another.
	for {
		s.mu.Lock()
		c := s.tokens[tokenKey{installation: 7, repo: "r"}]
		inFlight := c != nil && c.flight != nil
		s.mu.Unlock()
		if inFlight {
			break
		}
		time.Sleep(time.Millisecond) // polling the Source's state: no event to wait on
	}
	close(a.hold)
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("caller %d: %q, %v; want %q", i, got[i], errs[i], got[0])
		}
	}
	if n := a.exchanges.Load(); n != 1 {
		t.Fatalf("%d exchanges for 50 concurrent callers, want 1", n)
	}
}

// TestFailedExchangeIsAClearError: GitHub refusing the JWT is an
// ErrExchange error naming the App and installation, and no token; the
// next call tries again.
func TestFailedExchangeIsAClearError(t *testing.T) {
	a, s := newAppServer(t, time.Hour)
	a.fail.Store(true)
	_, err := s.Token(context.Background(), 7, "r")
	if !errors.Is(err, ErrExchange) || !strings.Contains(err.Error(), "GitHub App 42") ||
		!strings.Contains(err.Error(), "installation 7") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v, want ErrExchange naming App 42, installation 7 and GitHub's 401", err)
	}
	a.fail.Store(false)
	if tok, err := s.Token(context.Background(), 7, "r"); err != nil || tok == "" {
		t.Fatalf("after GitHub recovers: %q, %v", tok, err)
	}
}

// TestTransportPutsTheTokenOnRequests: a repository call carries the
// installation token, renewed as it ages, and a failed exchange sends
// nothing and says why without a token.
func TestTransportPutsTheTokenOnRequests(t *testing.T) {
	a, s := newAppServer(t, 30*time.Second)
	hc := &http.Client{Transport: s.Transport(nil)}
	srvURL := s.api.BaseURL.String()
	get := func() error {
		resp, err := hc.Get(srvURL + "repos/o/r")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	a.clock.Add(25 * time.Second)
	if err := get(); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"ghs_secret1", "ghs_secret2"} {
		if _, ok := a.seen.Load(tok); !ok {
			t.Errorf("no request carried %s", tok)
		}
	}
	a.fail.Store(true)
	a.clock.Add(25 * time.Second)
	err := get()
	if !errors.Is(err, ErrExchange) || strings.Contains(err.Error(), "ghs_") {
		t.Fatalf("err = %v, want ErrExchange without a token in it", err)
	}
	// The exchange met a 401, but the request itself was never sent.
	if v := githubtools.Classify(err); v != tool.VerdictNotSent {
		t.Errorf("Classify(%v) = %s, want not_sent", err, v)
	}
}

// TestInstallationIsLookedUpOncePerRepository: without a configured
// installation, a repository's is asked of GitHub on its first request
// (with the JWT) and kept, as is its token (each repository has its own);
// GitHub's names are case-insensitive.
func TestInstallationIsLookedUpOncePerRepository(t *testing.T) {
	a, s := newAppServerFor(t, time.Hour, 0)
	hc := &http.Client{Transport: s.Transport(nil)}
	for _, path := range []string{"repos/o/r", "repos/o/r/pulls", "repos/O/R/contents/x", "repos/o/other"} {
		resp, err := hc.Get(s.api.BaseURL.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := a.lookups.Load(); n != 2 {
		t.Errorf("%d installation look-ups for two repositories, want 2", n)
	}
	if n := a.exchanges.Load(); n != 2 {
		t.Errorf("%d token exchanges for two repositories of one installation, want 2", n)
	}
	if _, err := hc.Get(s.api.BaseURL.String() + "user"); !errors.Is(err, ErrExchange) || !strings.Contains(err.Error(), "CAPSTAN_GITHUB_APP_INSTALLATION_ID") {
		t.Errorf("a request naming no repository: %v, want an ErrExchange pointing at CAPSTAN_GITHUB_APP_INSTALLATION_ID", err)
	}
}
