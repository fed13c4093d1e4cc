package github_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

type seen struct{ path, auth string }

// recorder answers every request with an empty list and reports what it got.
func recorder(t *testing.T) (*httptest.Server, <-chan seen) {
	t.Helper()
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.Header.Get("Authorization")}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("[]"))
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestNewClientHonoursBaseURL(t *testing.T) {
	for _, tc := range []struct{ suffix, token, wantPath, wantAuth string }{
		{"", "", "/repos/acme/app/pulls", ""},
		{"/", "tok", "/repos/acme/app/pulls", "Bearer tok"},
		{"/api/v3/", "", "/api/v3/repos/acme/app/pulls", ""},
		{"/custom", "", "/custom/repos/acme/app/pulls", ""},
		{"/custom/", "tok", "/custom/repos/acme/app/pulls", "Bearer tok"},
	} {
		srv, got := recorder(t)
		c, err := githubtools.NewClient(srv.URL+tc.suffix, tc.token, srv.Client())
		if err != nil {
			t.Fatalf("%q: %v", tc.suffix, err)
		}
		if _, _, err := c.PullRequests.List(context.Background(), "acme", "app", nil); err != nil {
			t.Fatalf("%q: list: %v", tc.suffix, err)
		}
		if s := <-got; s.path != tc.wantPath || s.auth != tc.wantAuth {
			t.Errorf("base %q token %q: request %+v, want path %s auth %q", tc.suffix, tc.token, s, tc.wantPath, tc.wantAuth)
		}
	}
}

func TestNewClientDefaultsAndErrors(t *testing.T) {
	c, err := githubtools.NewClient("", "", nil)
	if err != nil || c.BaseURL.String() != "https://api.github.com/" {
		t.Errorf("default base = %v, %v", c.BaseURL, err)
	}
	for _, bad := range []string{"://nope", "api.github.com", "ftp://host/", "http://", "http://host/x?y=1", "http://[::1"} {
		if _, err := githubtools.NewClient(bad, "", nil); err == nil {
			t.Errorf("NewClient(%q) accepted a malformed URL", bad)
		}
	}
}
