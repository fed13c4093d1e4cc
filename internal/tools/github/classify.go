package github

import (
	"errors"
	"net/http"
	"strings"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/tool"
)

// errWriteNotSent marks an error from the read a mutating tool does before
// its write: the write itself was never sent. Classify turns an otherwise
// unknown verdict into VerdictNotSent for it.
var errWriteNotSent = errors.New("the write was not sent")

// Classify is tool.Classify (docs/design.md §5.4 step 4) for an error of a go-github
// call or of these tools, with what GitHub's answers mean: a rate limit
// (RateLimitWait: a 403 or 429 with GitHub's rate-limit marks, or
// go-github's refusal to send while a known limit is in force) did nothing
// ("not_sent"), and so did a failed read before a write; any other 4xx but
// 408 and 429 is a refusal ("failed"); a 5xx, 408, an unmarked 429 or a 202
// "accepted, still working" may have acted ("unknown"). Cancellation, the
// tools sentinels and transport errors keep tool.Classify's verdict.
func Classify(err error) tool.Verdict {
	v := classify(err)
	if v == tool.VerdictUnknown && errors.Is(err, errWriteNotSent) {
		return tool.VerdictNotSent // only the read before the write was in doubt
	}
	return v
}

func classify(err error) tool.Verdict {
	if v := tool.Classify(err); v != tool.VerdictUnknown {
		return v
	}
	switch {
	case errors.Is(err, gogithub.ErrPathForbidden):
		return tool.VerdictFailed // go-github refused a path with ".." before sending
	}
	if _, limited := RateLimitWait(err); limited {
		return tool.VerdictNotSent // GitHub refused it for a rate limit: it did nothing
	}
	status := HTTPStatus(err)
	switch {
	case status == 0:
		return tool.VerdictUnknown // no answer, and the transport proved nothing
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		return tool.VerdictFailed
	default:
		return tool.VerdictUnknown // 5xx, 408, 429, and 202 "accepted, still working"
	}
}

// HTTPStatus returns the status code GitHub answered with, or 0 when err
// carries no answer (including go-github's local rate-limit refusals, which
// fabricate a 403 without sending anything).
func HTTPStatus(err error) int {
	var resp *http.Response
	var er *gogithub.ErrorResponse
	var rate *gogithub.RateLimitError
	var abuse *gogithub.AbuseRateLimitError
	var twoFactor *gogithub.TwoFactorAuthError
	var accepted *gogithub.AcceptedError
	switch {
	case err == nil, notSentByRateGuard(err):
		return 0
	case errors.As(err, &er):
		resp = er.Response
	case errors.As(err, &rate):
		resp = rate.Response
	case errors.As(err, &abuse):
		resp = abuse.Response
	case errors.As(err, &twoFactor):
		resp = twoFactor.Response
	case errors.As(err, &accepted):
		return http.StatusAccepted
	}
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// notSentByRateGuard reports go-github's refusal to send while a known rate
// limit is in force. Its errors carry a fabricated 403 response and say
// "not making remote request" — that phrase is the only marker it leaves.
func notSentByRateGuard(err error) bool {
	var rate *gogithub.RateLimitError
	var abuse *gogithub.AbuseRateLimitError
	const phrase = "not making remote request"
	return (errors.As(err, &rate) && strings.Contains(rate.Message, phrase)) ||
		(errors.As(err, &abuse) && strings.Contains(abuse.Message, phrase))
}
