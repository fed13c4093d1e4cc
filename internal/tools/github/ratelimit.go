package github

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/config"
)

// RateLimitWait reports whether err is GitHub refusing a request for a rate
// limit, and how long GitHub asked the caller to wait before trying again.
//
// A rate-limited request did nothing, so it is safe to send again once the
// wait is over. That is GitHub's primary limit (a 403 or 429 with
// x-ratelimit-remaining: 0), its secondary limit (a 403 or 429 with
// Retry-After, or whose message or documentation link names the secondary
// rate limit), and go-github's own refusal to send while a limit it saw is
// still in force. A 403 without these marks is a refusal of another kind
// (permissions), and a 429 without them is left unknown.
//
// The wait is, in GitHub's order of precedence: Retry-After; else, with
// x-ratelimit-remaining: 0, the time left until x-ratelimit-reset, counted
// on GitHub's clock (its Date header) so a skewed local clock does not
// matter; else config.DefaultGitHubRateLimitWait. It is never negative.
func RateLimitWait(err error) (time.Duration, bool) {
	var rate *gogithub.RateLimitError
	var abuse *gogithub.AbuseRateLimitError
	var answer *gogithub.ErrorResponse
	switch {
	case err == nil:
		return 0, false
	case notSentByRateGuard(err):
		// go-github fabricated the answer from a limit it saw earlier; its
		// fields hold the time left, on the local clock go-github uses.
		wait := config.DefaultGitHubRateLimitWait
		if errors.As(err, &rate) && !rate.Rate.Reset.IsZero() {
			wait = time.Until(rate.Rate.Reset.Time)
		} else if errors.As(err, &abuse) && abuse.RetryAfter != nil {
			wait = *abuse.RetryAfter
		}
		return max(wait, 0), true
	case errors.As(err, &rate):
		return requestedWait(rate.Response), true
	case errors.As(err, &abuse):
		return requestedWait(abuse.Response), true
	case errors.As(err, &answer) && isRateLimitAnswer(answer):
		return requestedWait(answer.Response), true
	}
	return 0, false
}

// isRateLimitAnswer reports an answer go-github did not recognise as a rate
// limit (it knows only 403s) but that carries GitHub's marks of one.
func isRateLimitAnswer(e *gogithub.ErrorResponse) bool {
	r := e.Response
	if r == nil || (r.StatusCode != http.StatusForbidden && r.StatusCode != http.StatusTooManyRequests) {
		return false
	}
	return r.Header.Get("Retry-After") != "" ||
		r.Header.Get("X-RateLimit-Remaining") == "0" ||
		strings.Contains(strings.ToLower(e.Message), "secondary rate limit") ||
		strings.HasSuffix(e.DocumentationURL, "secondary-rate-limits") ||
		strings.HasSuffix(e.DocumentationURL, "#abuse-rate-limits")
}

// requestedWait reads the wait a rate-limited answer asks for.
func requestedWait(r *http.Response) time.Duration {
	if r == nil {
		return config.DefaultGitHubRateLimitWait
	}
	now := time.Now()
	if d, err := http.ParseTime(r.Header.Get("Date")); err == nil {
		now = d // GitHub's clock, the one its reset time is on
	}
	if v := strings.TrimSpace(r.Header.Get("Retry-After")); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
			const longest = int64(24 * time.Hour / time.Second) // no overflow, whatever the header says
			return time.Duration(min(max(secs, 0), longest)) * time.Second
		}
		if at, err := http.ParseTime(v); err == nil {
			return max(at.Sub(now), 0)
		}
	}
	if r.Header.Get("X-RateLimit-Remaining") == "0" {
		if secs, err := strconv.ParseInt(r.Header.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(secs, 0).Sub(now), 0)
		}
	}
	return config.DefaultGitHubRateLimitWait
}
