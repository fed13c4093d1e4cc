package github_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// A GitHub rate limit, in each form GitHub answers it, means GitHub did
// nothing: the call is not_sent, and its error carries the wait GitHub asked
// for. Any other 403 or 429 keeps its verdict and carries no wait.
func TestRateLimitedMutationIsNotSentWithTheWaitAsked(t *testing.T) {
	// GitHub's clock is an hour behind ours: the reset time must be read
	// on GitHub's clock (its Date header), or every wait below would be 0.
	date := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	at := func(d time.Duration) string { return fmt.Sprint(date.Add(d).Unix()) }
	const secondary = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
	const docs = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
	for _, tc := range []struct {
		name    string
		status  int
		header  http.Header
		message string
		docURL  string
		limited bool
		wait    time.Duration
		verdict tool.Verdict
	}{
		{"403 secondary with Retry-After", http.StatusForbidden, http.Header{"Retry-After": {"37"}}, secondary, docs, true, 37 * time.Second, tool.VerdictNotSent},
		{"403 secondary message only", http.StatusForbidden, nil, secondary, "", true, time.Minute, tool.VerdictNotSent},
		{"403 secondary, Retry-After as a date", http.StatusForbidden, http.Header{"Retry-After": {date.Add(90 * time.Second).Format(http.TimeFormat)}}, secondary, "", true, 90 * time.Second, tool.VerdictNotSent},
		{"403 primary", http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {at(time.Hour)}}, "API rate limit exceeded", "", true, time.Hour, tool.VerdictNotSent},
		{"429 primary", http.StatusTooManyRequests, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {at(95 * time.Second)}}, "API rate limit exceeded", "", true, 95 * time.Second, tool.VerdictNotSent},
		{"429 with Retry-After", http.StatusTooManyRequests, http.Header{"Retry-After": {"12"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {at(time.Hour)}}, secondary, "", true, 12 * time.Second, tool.VerdictNotSent},
		{"429 primary whose reset has passed", http.StatusTooManyRequests, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {at(-time.Minute)}}, "API rate limit exceeded", "", true, 0, tool.VerdictNotSent},
		{"403 permission", http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"4999"}, "X-Ratelimit-Reset": {at(time.Hour)}}, "Resource not accessible by integration", "", false, 0, tool.VerdictFailed},
		{"429 without GitHub's marks", http.StatusTooManyRequests, nil, "Too Many Requests", "", false, 0, tool.VerdictUnknown},
		{"503 with Retry-After", http.StatusServiceUnavailable, http.Header{"Retry-After": {"5"}}, "unavailable", "", false, 0, tool.VerdictUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				for k, v := range tc.header {
					w.Header()[k] = v
				}
				w.Header().Set("Date", date.Format(http.TimeFormat))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_ = json.NewEncoder(w).Encode(map[string]string{"message": tc.message, "documentation_url": tc.docURL})
			}))
			t.Cleanup(srv.Close)
			c := clientFor(t, srv.URL, nil)
			impl, err := tool.NewRegistry(githubtools.Tools(c)...).Get("github_create_pull_request")
			if err != nil {
				t.Fatal(err)
			}
			_, err = impl.Execute(context.Background(), tool.Call{OperationID: "op-1",
				Arguments: json.RawMessage(`{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`)})
			if err == nil || posts.Load() != 1 {
				t.Fatalf("err = %v after %d requests, want one refused request", err, posts.Load())
			}
			if got := tool.Classify(err); got != tc.verdict {
				t.Errorf("Classify(%v) = %q, want %q", err, got, tc.verdict)
			}
			wait, limited := githubtools.RateLimitWait(err)
			if limited != tc.limited || wait != tc.wait {
				t.Errorf("RateLimitWait = %s, %v; want %s, %v", wait, limited, tc.wait, tc.limited)
			}
			carried, ok := tool.RetryAfter(err)
			if ok != tc.limited || carried != tc.wait {
				t.Errorf("tool.RetryAfter = %s, %v; want %s, %v", carried, ok, tc.wait, tc.limited)
			}
		})
	}
}

// After a secondary limit, go-github refuses to send until the wait is over;
// that refusal is not_sent too and carries the time left.
func TestRateLimitGuardCarriesTheTimeLeft(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "40")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"You have exceeded a secondary rate limit.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`))
	}))
	t.Cleanup(srv.Close)
	c := clientFor(t, srv.URL, nil)
	if _, limited := githubtools.RateLimitWait(listAgainst(context.Background(), t, c)); !limited {
		t.Fatal("first answer not seen as a rate limit")
	}
	err := listAgainst(context.Background(), t, c)
	wait, limited := githubtools.RateLimitWait(err)
	if !limited || wait <= 30*time.Second || wait > 40*time.Second || githubtools.Classify(err) != tool.VerdictNotSent || githubtools.HTTPStatus(err) != 0 {
		t.Errorf("guarded: %v → wait %s, limited %v, verdict %q; want not_sent with the time left", err, wait, limited, githubtools.Classify(err))
	}
}
