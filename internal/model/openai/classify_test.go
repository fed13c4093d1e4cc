package openai

import (
	"testing"

	"github.com/capstanhq/capstan/internal/model"
)

func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status         int
		code, typ, msg string
		want           model.Outcome
	}{
		{408, "", "", "", model.OutcomeOverloaded},
		{409, "", "", "", model.OutcomeOverloaded},
		{429, "rate_limit_exceeded", "requests", "Rate limit reached; see https://platform.openai.com/account/billing", model.OutcomeOverloaded},
		{429, "insufficient_quota", "insufficient_quota", "", model.OutcomeRejected},
		{429, "", "billing_hard_limit_reached", "", model.OutcomeRejected},
		{429, "", "", "You have reached your spend limit", model.OutcomeRejected},
		{500, "", "", "", model.OutcomeOverloaded},
		{502, "", "", "", model.OutcomeOverloaded},
		{503, "", "", "", model.OutcomeOverloaded},
		{504, "", "", "", model.OutcomeOverloaded},
		{529, "", "overloaded_error", "", model.OutcomeOverloaded},
		{522, "", "", "", model.OutcomeOverloaded},
		{501, "", "", "", model.OutcomeRejected},
		{400, "", "invalid_request_error", "bad", model.OutcomeRejected},
		{400, "context_length_exceeded", "", "", model.OutcomeOverflow},
		{400, "", "", "This model's maximum context length is 8192 tokens", model.OutcomeOverflow},
		{413, "", "", "prompt is too long: 300000 tokens > 200000 maximum", model.OutcomeOverflow},
		{413, "", "", "request entity too large", model.OutcomeRejected},
		{401, "", "", "", model.OutcomeRejected},
		{403, "", "", "", model.OutcomeRejected},
		{404, "", "", "", model.OutcomeRejected},
		{422, "", "", "", model.OutcomeRejected},
		{422, "context_length_exceeded", "", "", model.OutcomeRejected}, // overflow is a 400/413 verdict
	}
	for _, tt := range tests {
		if got := classifyStatus(tt.status, tt.code, tt.typ, tt.msg); got != tt.want {
			t.Errorf("classifyStatus(%d, %q, %q, %q) = %s, want %s", tt.status, tt.code, tt.typ, tt.msg, got, tt.want)
		}
	}
}

func TestClassifyEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		data    string
		want    model.Outcome
		wantMsg string
	}{
		{`{"error":{"message":"Overloaded","type":"overloaded_error"}}`, model.OutcomeOverloaded, "Overloaded"},
		{`{"error":{"message":"x","type":"server_error","code":null}}`, model.OutcomeOverloaded, "x"},
		{`{"error":{"message":"x","code":"rate_limit_exceeded"}}`, model.OutcomeOverloaded, "x"},
		{`{"error":{"message":"x","code":"context_length_exceeded"}}`, model.OutcomeOverflow, "x"},
		{`{"error":{"message":"prompt is too long"}}`, model.OutcomeOverflow, "prompt is too long"},
		{`{"error":{"message":"x","code":"insufficient_quota"}}`, model.OutcomeRejected, "x"},
		{`{"error":{"message":"x","type":"invalid_request_error"}}`, model.OutcomeRejected, "x"},
		// vLLM puts the HTTP status in "code".
		{`{"error":{"object":"error","message":"x","type":"BadRequestError","code":400}}`, model.OutcomeRejected, "x"},
		{`{"error":{"message":"x","type":"InternalServerError","code":503}}`, model.OutcomeOverloaded, "x"},
		{`{"error":"upstream went away"}`, model.OutcomeInvalid, "upstream went away"},
		{`{"error":{"type":"weird"}}`, model.OutcomeInvalid, "the provider sent an error event mid-stream (weird)"},
		{`{"error":null}`, model.OutcomeInvalid, "the provider sent an error event mid-stream"},
	}
	for _, tt := range tests {
		got, msg := classifyEvent([]byte(tt.data))
		if got != tt.want || msg != tt.wantMsg {
			t.Errorf("classifyEvent(%s) = %s, %q; want %s, %q", tt.data, got, msg, tt.want, tt.wantMsg)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	p := New(Config{APIKey: testKey})
	if got := p.redact("key " + testKey + " twice " + testKey); got != "key [redacted] twice [redacted]" {
		t.Fatalf("redact = %q", got)
	}
	if got := New(Config{}).redact("nothing to hide"); got != "nothing to hide" {
		t.Fatalf("redact without a key = %q", got)
	}
}
