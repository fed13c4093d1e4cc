package anthropic

import (
	"testing"

	"github.com/capstanhq/capstan/internal/model"
)

func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status   int
		typ, msg string
		want     model.Outcome
	}{
		{429, "rate_limit_error", "", model.OutcomeOverloaded},
		{500, "api_error", "", model.OutcomeOverloaded},
		{502, "", "", model.OutcomeOverloaded},
		{503, "", "", model.OutcomeOverloaded},
		{504, "timeout_error", "", model.OutcomeOverloaded},
		{529, "overloaded_error", "", model.OutcomeOverloaded},
		{522, "", "", model.OutcomeOverloaded},
		{400, "overloaded_error", "", model.OutcomeOverloaded},
		{501, "", "", model.OutcomeRejected},
		{400, "invalid_request_error", "messages: text content blocks must be non-empty", model.OutcomeRejected},
		{400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum", model.OutcomeOverflow},
		{413, "request_too_large", "Request exceeds the maximum allowed number of bytes.", model.OutcomeRejected},
		{413, "", "prompt is too long", model.OutcomeOverflow},
		{401, "authentication_error", "", model.OutcomeRejected},
		{402, "billing_error", "", model.OutcomeRejected},
		{403, "permission_error", "", model.OutcomeRejected},
		{404, "not_found_error", "", model.OutcomeRejected},
		{422, "", "prompt is too long", model.OutcomeRejected}, // overflow is a 400/413 verdict
	}
	for _, tt := range tests {
		if got := classifyStatus(tt.status, tt.typ, tt.msg); got != tt.want {
			t.Errorf("classifyStatus(%d, %q, %q) = %s, want %s", tt.status, tt.typ, tt.msg, got, tt.want)
		}
	}
}

func TestClassifyEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ, msg string
		data     string
		want     model.Outcome
		wantMsg  string
	}{
		{"overloaded_error", "Overloaded", "", model.OutcomeOverloaded, "Overloaded"},
		{"rate_limit_error", "slow down", "", model.OutcomeOverloaded, "slow down"},
		{"api_error", "Internal server error", "", model.OutcomeOverloaded, "Internal server error"},
		{"timeout_error", "", "", model.OutcomeOverloaded, "the provider sent an error event mid-stream (timeout_error)"},
		{"invalid_request_error", "prompt is too long: 1 tokens > 0 maximum", "", model.OutcomeOverflow, "prompt is too long: 1 tokens > 0 maximum"},
		{"invalid_request_error", "bad", "", model.OutcomeRejected, "bad"},
		{"authentication_error", "x", "", model.OutcomeRejected, "x"},
		{"permission_error", "x", "", model.OutcomeRejected, "x"},
		{"billing_error", "x", "", model.OutcomeRejected, "x"},
		{"weird_error", "the servers are overloaded", "", model.OutcomeOverloaded, "the servers are overloaded"},
		{"weird_error", "odd", "", model.OutcomeInvalid, "odd"},
		// Read from the raw object when the SDK read nothing.
		{"", "", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, model.OutcomeOverloaded, "Overloaded"},
		{"", "", `upstream went away`, model.OutcomeInvalid, "the provider sent an error event mid-stream"},
	}
	for _, tt := range tests {
		got, msg := classifyEvent(tt.typ, tt.msg, []byte(tt.data))
		if got != tt.want || msg != tt.wantMsg {
			t.Errorf("classifyEvent(%q, %q, %s) = %s, %q; want %s, %q", tt.typ, tt.msg, tt.data, got, msg, tt.want, tt.wantMsg)
		}
	}
}

func TestStartInput(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"":                  "",
		"null":              "",
		"{}":                "",
		"{ }":               "",
		`{"path":"x"}`:      `{"path":"x"}`,
		` {"path": "x"} `:   `{"path": "x"}`,
		`{"nested":{}}`:     `{"nested":{}}`,
		`{"broken":`:        `{"broken":`, // kept, so the accumulator refuses it
		`{"a":1,"b":[1,2]}`: `{"a":1,"b":[1,2]}`,
	} {
		if got := startInput(raw); got != want {
			t.Errorf("startInput(%q) = %q, want %q", raw, got, want)
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
	if p.redactErr(nil) != nil {
		t.Fatal("redactErr(nil) is not nil")
	}
}
