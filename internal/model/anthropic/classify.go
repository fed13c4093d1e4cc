package anthropic

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/capstanhq/capstan/internal/model"
)

// classifyRequestError classifies a failure of the request itself, before any
// of the stream was read (docs/design.md §4.4). resp is the response, if one arrived.
func (p *Provider) classifyRequestError(ctx context.Context, rec *model.PhaseRecorder, resp *http.Response, err error) *model.AttemptError {
	if ae := model.RequestCancelled(ctx, rec, p.redact); ae != nil {
		return ae
	}

	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) || (resp != nil && resp.StatusCode >= 400) {
		rec.Advance(model.PhaseHeadersReceived)
		ae := &model.AttemptError{Phase: rec.Phase()}
		var typ, msg string
		if apiErr != nil {
			ae.HTTPStatus = apiErr.StatusCode
			typ, msg = string(apiErr.Type()), apiErr.Message
			ae.Err = p.redactErr(scrubbed(apiErr))
		} else {
			// The SDK could not read the error body; the status still decides.
			ae.HTTPStatus = resp.StatusCode
			ae.Err = p.redactErr(err)
		}
		if resp != nil {
			ae.RetryAfter = model.RetryAfter(resp.Header, time.Now())
		}
		ae.Outcome = classifyStatus(ae.HTTPStatus, typ, msg)
		if msg == "" {
			msg = fmt.Sprintf("the provider answered HTTP %d %s", ae.HTTPStatus, http.StatusText(ae.HTTPStatus))
		}
		ae.Message = p.redact(msg)
		return ae
	}

	return model.TransportFailure(err, rec, p.redact)
}

// classifyStatus maps an HTTP error status, refined by Anthropic's error type
// and message, onto an outcome (docs/design.md §4.4).
func classifyStatus(status int, typ, msg string) model.Outcome {
	if typ == "overloaded_error" {
		return model.OutcomeOverloaded // whatever status a proxy put on it
	}
	switch status {
	case http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusConflict,
		http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable,
		http.StatusGatewayTimeout, 529:
		return model.OutcomeOverloaded
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		if isOverflow(msg) {
			return model.OutcomeOverflow
		}
		return model.OutcomeRejected
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
		return model.OutcomeRejected // the server will never serve this request
	}
	switch {
	case status >= 500:
		// Other 5xx (Cloudflare's 520–524, …) are transient server trouble.
		return model.OutcomeOverloaded
	case status >= 400:
		return model.OutcomeRejected // 401, 402, 403, 404, 422, …
	default:
		return model.OutcomeUnknown
	}
}

// classifyEvent classifies an error object received in a 200 stream
// ({"type":"error","error":{"type":...,"message":...}}) by its error type,
// never by the status (docs/design.md §4.5). typ and msg are what the SDK
// read, if it did; data is the raw object, read here when they are empty.
// It returns the provider's own message.
func classifyEvent(typ, msg string, data []byte) (model.Outcome, string) {
	if typ == "" && msg == "" {
		typ, msg = parseEventError(data)
	}
	if msg == "" {
		msg = "the provider sent an error event mid-stream"
		if typ != "" {
			msg += " (" + typ + ")"
		}
	}
	switch typ {
	case "overloaded_error", "rate_limit_error", "api_error", "timeout_error":
		return model.OutcomeOverloaded, msg
	case "invalid_request_error", "request_too_large":
		if isOverflow(msg) {
			return model.OutcomeOverflow, msg
		}
		return model.OutcomeRejected, msg
	case "authentication_error", "permission_error", "not_found_error", "billing_error":
		return model.OutcomeRejected, msg
	}
	lower := strings.ToLower(msg)
	switch {
	case isOverflow(msg):
		return model.OutcomeOverflow, msg
	case strings.Contains(lower, "overloaded"), strings.Contains(lower, "rate limit"):
		return model.OutcomeOverloaded, msg
	default:
		// An error we cannot place: the 2xx answer is unusable, which is what
		// the invalid outcome retries.
		return model.OutcomeInvalid, msg
	}
}

// parseEventError reads the type and message of an Anthropic error object.
func parseEventError(data []byte) (typ, msg string) {
	var env struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &env) != nil {
		return "", ""
	}
	return env.Error.Type, env.Error.Message
}

// isOverflow reports whether the provider said the prompt does not fit the
// model's context window ("prompt is too long: 210000 tokens > 200000
// maximum").
func isOverflow(msg string) bool {
	lower := strings.ToLower(msg)
	for _, s := range []string{"prompt is too long", "context window", "context length", "context limit", "input is too long"} {
		if strings.Contains(lower, s) {
			return true
		}
	}
	return false
}

// scrubbed copies an SDK API error without its request and response: the
// request carries the credential header (and so does the response, through
// its Request field), and an AttemptError travels to logs and to Temporal.
// The error's fields, and errors.As on *anthropic.Error, remain.
func scrubbed(e *anthropic.Error) *anthropic.Error {
	c := *e
	c.Request, c.Response = nil, nil
	return &c
}

// redact removes the API key from text that is about to leave the provider,
// in case a server or a URL echoes it.
func (p *Provider) redact(s string) string { return model.Redact(s, p.key) }

// redactedError is an error whose text has the API key removed: the SDK's
// API errors quote the response body, which may echo the key.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr wraps err so that its text cannot leak the key; nil stays nil.
func (p *Provider) redactErr(err error) error {
	if err == nil {
		return nil
	}
	return &redactedError{msg: p.redact(err.Error()), err: err}
}

// isDecodeError reports whether err means the stream's bytes arrived but did
// not form a valid event.
func isDecodeError(err error) bool {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.As(err, &syn) || errors.As(err, &typ) || errors.Is(err, bufio.ErrTooLong)
}
