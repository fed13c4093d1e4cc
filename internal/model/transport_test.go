package model

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"none", http.Header{}, 0},
		{"milliseconds", http.Header{"Retry-After-Ms": {"250"}}, 250 * time.Millisecond},
		{"fractional milliseconds", http.Header{"Retry-After-Ms": {"12.5"}}, 12500 * time.Microsecond},
		{"milliseconds win over seconds", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3"}}, 250 * time.Millisecond},
		{"bad milliseconds fall back to seconds", http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"3"}}, 3 * time.Second},
		{"seconds", http.Header{"Retry-After": {"20"}}, 20 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{"long wait kept for the guard to judge", http.Header{"Retry-After": {"3600"}}, time.Hour},
		{"http date", http.Header{"Retry-After": {now.Add(45 * time.Second).Format(http.TimeFormat)}}, 45 * time.Second},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0},
		{"garbage", http.Header{"Retry-After": {"later"}}, 0},
		{"absurd", http.Header{"Retry-After": {"1e300"}}, 0},
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.header, now); got != tt.want {
			t.Errorf("%s: RetryAfter = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	if got := Redact("key sk-1 twice sk-1", "sk-1"); got != "key [redacted] twice [redacted]" {
		t.Errorf("Redact = %q", got)
	}
	if got := Redact("nothing to hide", ""); got != "nothing to hide" {
		t.Errorf("Redact with no secret = %q", got)
	}
}
