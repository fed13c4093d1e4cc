package ghapp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/ghapp"
	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// tokenBody is the body of a request for an installation token, as far
// as it bounds the token.
type tokenBody struct {
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

// recorder passes every request to the sandbox's GitHub and keeps the
// bodies of the token requests and the token each repository call carried.
type recorder struct {
	next   http.Handler
	mu     sync.Mutex
	bodies []tokenBody
	tokens map[string]string // request path -> bearer token
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	if strings.HasSuffix(r.URL.Path, "/access_tokens") {
		data, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(data))
		var b tokenBody
		_ = json.Unmarshal(data, &b)
		rec.bodies = append(rec.bodies, b)
	} else if strings.HasPrefix(r.URL.Path, "/repos/") {
		rec.tokens[r.URL.Path] = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	rec.mu.Unlock()
	rec.next.ServeHTTP(w, r)
}

// An installation token is requested for the one repository the call
// acts on and with only the permissions capstan's GitHub tools need; the
// sandbox's GitHub, as GitHub does, then answers 404 when it is used on
// another repository of the installation.
func TestInstallationTokensAreRequestedForTheRepositoryAndTheToolsPermissions(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := sandbox.NewGitHub()
	g.SetApp(sandbox.GitHubApp{ID: 42, Slug: "capstan-test", PublicKey: &key.PublicKey, InstallationID: 7})
	rec := &recorder{next: g, tokens: map[string]string{}}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	s, err := ghapp.New(ghapp.Config{AppID: 42, Key: key, InstallationID: 7, BaseURL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := githubtools.NewClient(srv.URL+"/", "", &http.Client{Transport: s.Transport(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Issues.Create(ctx, "acme", "payments", &github.IssueRequest{Title: github.String("hello")}); err != nil {
		t.Fatal(err)
	}

	perms := map[string]string{"contents": "write", "issues": "write", "metadata": "read", "pull_requests": "write"}
	want := []tokenBody{{Repositories: []string{"app"}, Permissions: perms}, {Repositories: []string{"payments"}, Permissions: perms}}
	rec.mu.Lock()
	got, appToken := rec.bodies, rec.tokens["/repos/acme/app"]
	rec.mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("token requests = %+v, want %+v", got, want)
	}

	// acme/app's token does not reach acme/payments.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/repos/acme/payments", nil)
	req.Header.Set("Authorization", "Bearer "+appToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if appToken == "" || resp.StatusCode != http.StatusNotFound {
		t.Errorf("acme/app's token (%d bytes) on acme/payments: status %d, want 404", len(appToken), resp.StatusCode)
	}
}
