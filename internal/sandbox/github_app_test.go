package sandbox_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/ghapp"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// TestGitHubAppTokens: the fake takes the App's JWT only when it is signed
// with the App's key and current, issues installation tokens that live
// TokenLifetime, writes what they write as the App's bot, and refuses one
// past its expiry with 401 on the other endpoints.
func TestGitHubAppTokens(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := sandbox.NewGitHub()
	clock := sandbox.NewManualClock(time.Now())
	g.SetNow(clock.Now)
	g.SetApp(sandbox.GitHubApp{ID: 42, Slug: "capstan-test", PublicKey: &key.PublicKey, InstallationID: 7, TokenLifetime: 30 * time.Second})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	source := func(k *rsa.PrivateKey, now func() time.Time) *ghapp.Source {
		s, err := ghapp.New(ghapp.Config{AppID: 42, Key: k, BaseURL: srv.URL + "/", Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// The Source's clock stands still while the fake's moves on, so it
	// sends a token the fake has seen expire.
	lagging := sandbox.NewManualClock(clock.Now())
	s := source(key, lagging.Now)
	if login, err := s.Login(ctx); err != nil || login != "capstan-test[bot]" || g.AppLogin() != login {
		t.Fatalf("Login = %q, %v; want capstan-test[bot]", login, err)
	}
	c, err := githubtools.NewClient(srv.URL+"/", "", &http.Client{Transport: s.Transport(nil)})
	if err != nil {
		t.Fatal(err)
	}
	issue, _, err := c.Issues.Create(ctx, "o", "r", &github.IssueRequest{Title: github.String("hello")})
	if err != nil || issue.GetUser().GetLogin() != "capstan-test[bot]" {
		t.Fatalf("issue by %q, %v; want the bot's", issue.GetUser().GetLogin(), err)
	}

	// 31 s on, the token has expired at the fake: 401, and the next call
	// gets a new one.
	clock.Advance(31 * time.Second)
	_, resp, err := c.Repositories.Get(ctx, "o", "r")
	if resp == nil || resp.StatusCode != http.StatusUnauthorized || g.Stats().RefusedTokens != 1 {
		t.Fatalf("a call with an expired token: %v, %v; want 401 Bad credentials, counted", resp, err)
	}
	if _, _, err := c.Repositories.Get(ctx, "o", "r"); err != nil {
		t.Fatalf("the call after the 401: %v", err)
	}
	if n := g.Stats().AppTokensIssued; n != 2 || len(g.AppTokens()) != 2 {
		t.Errorf("tokens issued = %d, want 2", n)
	}

	// A JWT signed with another key, or one already expired, is refused.
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err := source(other, clock.Now).Login(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Login with another key: %v, want 401", err)
	}
	past := func() time.Time { return clock.Now().Add(-20 * time.Minute) }
	if _, err := source(key, past).Token(ctx, 7, "r"); !errors.Is(err, ghapp.ErrExchange) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Token with an expired JWT: %v, want ErrExchange with a 401", err)
	}
}
