package sandbox

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// How the GitHub fake refuses when a fault rule says so: in GitHub's words,
// with the headers go-github reads.

// Where GitHub's rate-limit answers point.
const (
	ghPrimaryRateLimitDocs   = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit"
	ghSecondaryRateLimitDocs = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
)

// checkGitHubRefusal checks the status of a rate-limit rule and fills in
// GitHub's: 403 for a secondary limit; 429, or 403 as GitHub also sends, for
// the primary one.
func checkGitHubRefusal(rule *FaultRule) error {
	switch {
	case rule.Kind == FaultSecondaryRateLimit && rule.Status != 0 && rule.Status != http.StatusForbidden:
		return errors.New("a secondary rate limit is always status 403")
	case rule.Kind == FaultSecondaryRateLimit:
		rule.Status = http.StatusForbidden
	case rule.Status == 0:
		rule.Status = http.StatusTooManyRequests
	case rule.Status != http.StatusTooManyRequests && rule.Status != http.StatusForbidden:
		return errors.New("a primary rate limit is status 429 or 403")
	}
	return nil
}

// refuse answers as GitHub does when it will not act. The rate-limit answers
// carry what go-github reads: a secondary limit is a 403 whose
// documentation_url ends in "secondary-rate-limits", with Retry-After; a
// primary limit has x-ratelimit-remaining 0 and x-ratelimit-reset.
func (g *GitHub) refuse(w http.ResponseWriter, rule FaultRule) {
	g.dataMu.Lock()
	now := g.now()
	g.dataMu.Unlock()
	requestID := fmt.Sprintf("SANDBOX:%X", now.UnixNano())
	h := w.Header()
	h.Set("X-GitHub-Request-Id", requestID)
	support := " If you reach out to GitHub Support for help, please include the request ID " + requestID + "."
	switch rule.Kind {
	case FaultSecondaryRateLimit:
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(rule.RetryAfter), 10))
		writeJSONBody(w, rule.Status, map[string]any{"documentation_url": ghSecondaryRateLimitDocs,
			"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again." + support})
	case FaultRateLimit:
		h.Set("X-RateLimit-Limit", "5000")
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Used", "5000")
		reset := now.Add(time.Duration(retryAfterSeconds(rule.RetryAfter)) * time.Second)
		h.Set("X-RateLimit-Reset", strconv.FormatInt((reset.UnixNano()+int64(time.Second)-1)/int64(time.Second), 10))
		h.Set("X-RateLimit-Resource", "core")
		writeJSONBody(w, rule.Status, map[string]any{"documentation_url": ghPrimaryRateLimitDocs,
			"message": "API rate limit exceeded for user ID 1." + support})
	default:
		writeJSONBody(w, rule.Status, map[string]any{"message": "Server Error"})
	}
}
