package ghapp_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/ghapp"
	"github.com/capstanhq/capstan/internal/sandbox"
)

// The startup check of a configured installation asks GitHub for the
// installation with the App's JWT and mints no token: the App's
// installation passes, another is an ErrExchange error with GitHub's 404.
func TestCheckInstallationMintsNoToken(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := sandbox.NewGitHub()
	g.SetApp(sandbox.GitHubApp{ID: 42, Slug: "capstan-test", PublicKey: &key.PublicKey, InstallationID: 7})
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	s, err := ghapp.New(ghapp.Config{AppID: 42, Key: key, InstallationID: 7, BaseURL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CheckInstallation(ctx, 7); err != nil {
		t.Errorf("the App's installation: %v", err)
	}
	if err := s.CheckInstallation(ctx, 8); !errors.Is(err, ghapp.ErrExchange) || !strings.Contains(err.Error(), "404") {
		t.Errorf("another installation: %v, want ErrExchange with GitHub's 404", err)
	}
	if n := g.Stats().AppTokensIssued; n != 0 {
		t.Errorf("%d tokens issued by the checks, want none", n)
	}
}
