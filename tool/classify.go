package tool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/capstanhq/capstan"
)

// Verdict says what a failed Execute means for the effect it attempted: an
// outcome of capstan's one vocabulary.
type Verdict = capstan.Outcome

const (
	// VerdictFailed: the request was refused and nothing happened — e.g. an
	// HTTP 4xx other than 408 and 429, or arguments rejected before anything
	// was sent. The operation may be released; repeating the same call fails
	// again.
	VerdictFailed = capstan.OutcomeFailed
	// VerdictNotSent: provably no request byte reached the server (the dial,
	// including a connect timeout, or the DNS lookup failed, or the TLS
	// handshake was refused), or the service refused the request for a rate
	// limit (RetryAfterError), or the tool proved its effect was never
	// requested. Safe to send again.
	VerdictNotSent = capstan.OutcomeNotSent
	// VerdictUnknown: the request may have been written and may have acted —
	// a timeout, a reset or EOF, an HTTP 5xx, 408, or a 429 its tool could
	// not identify as a rate limit, or anything not proven otherwise. The operation must be reconciled before it is
	// repeated.
	VerdictUnknown = capstan.OutcomeUnknown
	// VerdictCancelled: the caller's context was cancelled. It proves nothing
	// about the request; a cancelled mutation is reconciled like an unknown
	// one (docs/design.md §5.6).
	VerdictCancelled = capstan.OutcomeCancelled
)

// Classify is the rule of docs/design.md §5.4 step 4 for an error returned by Execute:
// success (nil) has no verdict; a definite refusal is "failed"; only proof
// that nothing was sent is "not_sent"; everything else is "unknown", and in
// particular a timeout is never "failed" (docs/design.md §10.4). When in doubt the
// answer is "unknown", because reconciling a call that did nothing is cheap
// and repeating one that acted is not.
//
// Classify knows the sentinels of this package and the errors of Go's
// network stack, which every HTTP client shares. What an answer of a
// particular service means (its status codes, its client library's local
// refusals) is that service's tools' to say: they mark the errors they
// return with WithVerdict, and Classify reports that verdict first.
func Classify(err error) Verdict {
	var marked *verdictError
	var limited *RetryAfterError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &marked):
		return marked.verdict
	case errors.As(err, &limited):
		return VerdictNotSent // a rate-limited request did nothing
	case errors.Is(err, context.Canceled):
		return VerdictCancelled
	case errors.Is(err, ErrInvalidArguments), errors.Is(err, ErrUnknownTool), errors.Is(err, ErrRefused),
		errors.Is(err, ErrChangedSinceRead):
		return VerdictFailed
	}
	// Transport errors. A client that returns ctx.Err() once the caller's
	// context expired (as go-github does) loses the transport error, so a
	// deadline that struck during the dial has lost its proof and stays
	// unknown.
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

// WithVerdict returns err marked so that Classify reports v for it and for
// any error wrapping it. Its message and its chain (errors.Is, errors.As) are
// err's. A nil err stays nil.
func WithVerdict(err error, v Verdict) error {
	if err == nil {
		return nil
	}
	return &verdictError{err: err, verdict: v}
}

// verdictError is an error its tool has classified.
type verdictError struct {
	err     error
	verdict Verdict
}

func (e *verdictError) Error() string { return e.err.Error() }
func (e *verdictError) Unwrap() error { return e.err }

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
