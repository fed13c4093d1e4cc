package tools

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-github/v62/github"
)

// Verdict says what a failed Execute means for the effect it attempted.
type Verdict string

const (
	// VerdictFailed: the request was refused and nothing happened — a 4xx
	// other than 408 and 429, or arguments rejected before anything was sent.
	// The operation may be released; repeating the same call fails again.
	VerdictFailed Verdict = "failed"
	// VerdictNotSent: provably no request byte reached the server (the dial,
	// including a connect timeout, or the DNS lookup failed, the TLS
	// handshake was refused, or go-github's rate-limit guard declined to
	// send), or a mutating tool failed in the read it makes before its write.
	// Safe to send again.
	VerdictNotSent Verdict = "not_sent"
	// VerdictUnknown: the request may have been written and may have acted —
	// a timeout, a reset or EOF, a 5xx, 408 or 429, or anything not proven
	// otherwise. The operation must be reconciled before it is repeated.
	VerdictUnknown Verdict = "unknown"
	// VerdictCancelled: the caller's context was cancelled. It proves nothing
	// about the request; a cancelled mutation is reconciled like an unknown
	// one (DESIGN §5.6).
	VerdictCancelled Verdict = "cancelled"
)

// errRefused marks a call this package refused on its own before sending the
// mutation (e.g. a put_file path that is a directory on the branch). It
// classifies as VerdictFailed.
var errRefused = errors.New("refused")

// Classify is the rule of DESIGN §5.4 step 4 for an error returned by Execute:
// success (nil) has no verdict; a definite refusal is "failed"; only proof
// that nothing was sent is "not_sent"; everything else is "unknown", and in
// particular a timeout is never "failed" (invariant 4). When in doubt the
// answer is "unknown", because reconciling a call that did nothing is cheap
// and repeating one that acted is not.
func Classify(err error) Verdict {
	v := classify(err)
	if v == VerdictUnknown && errors.Is(err, errWriteNotSent) {
		return VerdictNotSent // only the read before the write was in doubt
	}
	return v
}

func classify(err error) Verdict {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return VerdictCancelled
	case errors.Is(err, ErrInvalidArguments), errors.Is(err, ErrUnknownTool),
		errors.Is(err, errRefused), errors.Is(err, github.ErrPathForbidden):
		return VerdictFailed
	case notSentByRateGuard(err):
		return VerdictNotSent
	}
	if status := HTTPStatus(err); status != 0 {
		var rate *github.RateLimitError
		var abuse *github.AbuseRateLimitError
		switch {
		case errors.As(err, &rate), errors.As(err, &abuse):
			return VerdictUnknown // rate limited: treated like 429
		case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			return VerdictFailed
		default:
			return VerdictUnknown // 5xx, 408, 429, and 202 "accepted, still working"
		}
	}
	// Transport errors. When the caller's context expired, go-github returns
	// ctx.Err() instead of the transport error, so a deadline that struck
	// during the dial has lost its proof and stays unknown.
	var op *net.OpError
	var dns *net.DNSError
	if (errors.As(err, &op) && op.Op == "dial") || errors.As(err, &dns) {
		return VerdictNotSent // no connection, so no request byte was written
	}
	if tlsRefused(err) {
		return VerdictNotSent // the handshake precedes the request
	}
	return VerdictUnknown
}

// HTTPStatus returns the status code GitHub answered with, or 0 when err
// carries no answer (including go-github's local rate-limit refusals, which
// fabricate a 403 without sending anything).
func HTTPStatus(err error) int {
	var resp *http.Response
	var er *github.ErrorResponse
	var rate *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var twoFactor *github.TwoFactorAuthError
	var accepted *github.AcceptedError
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
	var rate *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	const phrase = "not making remote request"
	return (errors.As(err, &rate) && strings.Contains(rate.Message, phrase)) ||
		(errors.As(err, &abuse) && strings.Contains(abuse.Message, phrase))
}

// tlsRefused reports a TLS handshake failure: certificate verification or a
// protocol-level refusal, all before the first request byte.
func tlsRefused(err error) bool {
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	// A record header error can also strike mid-connection; only the one
	// about the very first record is a handshake failure.
	firstRecord := errors.As(err, &record) && strings.Contains(record.Msg, "first record")
	// net/http turns a first record that reads "HTTP/" into ErrSchemeMismatch.
	return firstRecord || errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &verify) ||
		errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid)
}
