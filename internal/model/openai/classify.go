package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/capstanhq/capstan/internal/model"
)

// classifyRequestError classifies a failure of the request itself, before any
// of the stream was read (docs/design.md §4.4). resp is the response, if one arrived.
func (p *Provider) classifyRequestError(ctx context.Context, rec *model.PhaseRecorder, resp *http.Response, err error) *model.AttemptError {
	if ae := model.RequestCancelled(ctx, rec, p.redact); ae != nil {
		return ae
	}

	var apiErr *openai.Error
	if errors.As(err, &apiErr) || (resp != nil && resp.StatusCode >= 400) {
		rec.Advance(model.PhaseHeadersReceived)
		ae := &model.AttemptError{Phase: rec.Phase()}
		var code, typ, msg string
		if apiErr != nil {
			ae.HTTPStatus = apiErr.StatusCode
			code, typ, msg = apiErr.Code, apiErr.Type, apiErr.Message
			ae.Err = scrubbed(apiErr)
		} else {
			// The SDK could not decode the error body (e.g. an HTML page
			// from a proxy); the status still decides.
			ae.HTTPStatus = resp.StatusCode
			ae.Err = err
		}
		if resp != nil {
			ae.RetryAfter = model.RetryAfter(resp.Header, time.Now())
		}
		ae.Outcome = classifyStatus(ae.HTTPStatus, code, typ, msg)
		if msg == "" {
			msg = fmt.Sprintf("the provider answered HTTP %d %s", ae.HTTPStatus, http.StatusText(ae.HTTPStatus))
		}
		ae.Message = p.redact(msg)
		return ae
	}

	return model.TransportFailure(err, rec, p.redact)
}

// classifyStatus maps an HTTP error status, refined by the provider's error
// code, type and message, onto an outcome (docs/design.md §4.4).
func classifyStatus(status int, code, typ, msg string) model.Outcome {
	switch status {
	case http.StatusTooManyRequests:
		if isQuota(code, typ, msg) {
			return model.OutcomeRejected
		}
		return model.OutcomeOverloaded
	case http.StatusRequestTimeout, http.StatusConflict,
		http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable,
		http.StatusGatewayTimeout, 529:
		return model.OutcomeOverloaded
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		if isOverflow(code, typ, msg) {
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
		return model.OutcomeRejected // 401, 403, 404, 422, …
	default:
		return model.OutcomeUnknown
	}
}

// classifyEvent classifies an SSE error object received in a 200 stream by
// its type and code, never by the status (docs/design.md §4.5). It returns the
// provider's own message.
func classifyEvent(data []byte) (model.Outcome, string) {
	code, typ, msg, status := parseEventError(data)
	if msg == "" {
		msg = "the provider sent an error event mid-stream"
		if typ != "" || code != "" {
			msg += fmt.Sprintf(" (%s)", strings.Trim(typ+" "+code, " "))
		}
	}
	kind := strings.ToLower(code + " " + typ)
	switch {
	case isOverflow(code, typ, msg):
		return model.OutcomeOverflow, msg
	case isQuota(code, typ, msg):
		return model.OutcomeRejected, msg
	case containsAny(kind, "overloaded", "rate_limit", "rate limit", "server_error", "unavailable", "timeout", "internal_error", "api_error"),
		containsAny(strings.ToLower(msg), "overloaded", "rate limit"):
		return model.OutcomeOverloaded, msg
	case status >= 400:
		return classifyStatus(status, code, typ, msg), msg
	case containsAny(kind, "invalid_request", "authentication", "permission", "not_found", "content_filter", "content_policy"):
		return model.OutcomeRejected, msg
	default:
		// An error we cannot place: the 2xx answer is unusable, which is what
		// the invalid outcome retries.
		return model.OutcomeInvalid, msg
	}
}

// parseEventError reads {"error": {...}} as OpenAI and most compatible
// servers send it. "code" may be a string or a number (vLLM sends the HTTP
// status there); "error" may also be a bare string.
func parseEventError(data []byte) (code, typ, msg string, status int) {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &env) != nil {
		return "", "", "", 0
	}
	var s string
	if json.Unmarshal(env.Error, &s) == nil {
		return "", "", s, 0
	}
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(env.Error, &e) != nil {
		return "", "", "", 0
	}
	if json.Unmarshal(e.Code, &code) != nil {
		var n json.Number
		if json.Unmarshal(e.Code, &n) == nil {
			code = n.String()
			if v, err := strconv.Atoi(code); err == nil && v >= 100 && v <= 599 {
				status = v
			}
		}
	}
	return code, e.Type, e.Message, status
}

// isOverflow reports whether the provider said the prompt does not fit the
// model's context window.
func isOverflow(code, typ, msg string) bool {
	return containsAny(strings.ToLower(code+" "+typ), "context_length_exceeded", "context_window_exceeded") ||
		containsAny(strings.ToLower(msg), "maximum context length", "prompt is too long",
			"context_length_exceeded", "context window", "maximum model length")
}

// isQuota reports whether a 429 means the account is out of quota or over
// its spend limit, which waiting does not fix. "billing" is matched in the
// code and type only: OpenAI's ordinary rate-limit messages mention the
// billing page.
func isQuota(code, typ, msg string) bool {
	return containsAny(strings.ToLower(code+" "+typ), "insufficient_quota", "quota_exceeded", "billing", "spend_limit", "spend limit") ||
		containsAny(strings.ToLower(msg), "exceeded your current quota", "insufficient_quota", "spend limit", "spending limit")
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// scrubbed copies an SDK API error without its request and response: the
// request carries the Authorization header (and so does the response, through
// its Request field), and an AttemptError travels to logs and to Temporal.
// The error's fields, and errors.As on *openai.Error, remain.
func scrubbed(e *openai.Error) *openai.Error {
	c := *e
	c.Request, c.Response = nil, nil
	return &c
}

// redact removes the API key from text that is about to leave the provider,
// in case a server or a URL echoes it.
func (p *Provider) redact(s string) string { return model.Redact(s, p.key) }

// isDecodeError reports whether err means the stream's bytes arrived but did
// not form a valid chunk.
func isDecodeError(err error) bool {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.As(err, &syn) || errors.As(err, &typ) || errors.Is(err, bufio.ErrTooLong)
}
