package redact_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/redact"
)

const secret = "sk-live/4f+9 Q?x=1&y" // characters every escaping changes

// TestStringMasksEveryForm: a secret is masked as it is, URL-escaped,
// in each base64 and inside quoted strings; short values and text without
// a secret pass unchanged.
func TestStringMasksEveryForm(t *testing.T) {
	r := redact.New(secret, "short", "")
	b := []byte(secret)
	quoted := strconv.Quote(secret)
	js, _ := json.Marshal(secret)
	forms := map[string]string{
		"raw":            secret,
		"query escaped":  url.QueryEscape(secret),
		"path escaped":   url.PathEscape(secret),
		"base64":         base64.StdEncoding.EncodeToString(b),
		"raw base64":     base64.RawStdEncoding.EncodeToString(b),
		"url base64":     base64.URLEncoding.EncodeToString(b),
		"raw url base64": base64.RawURLEncoding.EncodeToString(b),
		"Go quoted":      quoted,
		"JSON":           string(js),
	}
	for name, form := range forms {
		got := r.String("before " + form + " after")
		if strings.Contains(got, form) || strings.Contains(got, "sk-live") || !strings.Contains(got, redact.Mask) {
			t.Errorf("%s: %q, want the secret masked", name, got)
		}
	}
	for _, plain := range []string{"a short word", "nothing secret here at all", ""} {
		if got := r.String(plain); got != plain {
			t.Errorf("String(%q) = %q, want it unchanged", plain, got)
		}
	}
	if redact.New("short", "") != nil {
		t.Error("New of no value of 8 bytes or more is not nil")
	}
	var none *redact.Redactor
	if got := none.String(secret); got != secret {
		t.Errorf("a nil redactor changed %q to %q", secret, got)
	}
}

// TestLongerSecretWins: a secret that another one starts is masked whole.
func TestLongerSecretWins(t *testing.T) {
	r := redact.New("abcdefgh", "abcdefghijklmnop")
	if got := r.String("x abcdefghijklmnop y"); got != "x "+redact.Mask+" y" {
		t.Errorf("got %q", got)
	}
}

// TestErrorWrapsNothingOnceMasked: a masked error's chain no longer holds
// the original, whose text has the secret; an error without one is kept.
func TestErrorWrapsNothingOnceMasked(t *testing.T) {
	r := redact.New(secret)
	plain := errors.New("nothing to hide")
	if got := r.Error(plain); got != plain {
		t.Errorf("Error(%v) = %v, want the same error", plain, got)
	}
	inner := errors.New("dial https://x/?key=" + url.QueryEscape(secret))
	got := r.Error(fmt.Errorf("connect: %w", inner))
	if strings.Contains(got.Error(), "sk-live") || errors.Is(got, inner) || errors.Unwrap(got) != nil {
		t.Errorf("Error = %v (unwraps to %v), want the text masked and no chain", got, errors.Unwrap(got))
	}
}

type inner struct {
	Reason string
	Data   []byte
	Raw    json.RawMessage
	hidden string
}

type result struct {
	Name   string
	Inner  inner
	Ptr    *inner
	List   []string
	ByName map[string]string
	Any    any
	Count  int
}

// TestValueMasksACopy: every string of a result is masked in a copy; the
// original is untouched, and a result without a secret is the same value.
func TestValueMasksACopy(t *testing.T) {
	r := redact.New(secret)
	orig := result{
		Name:   "op 1",
		Inner:  inner{Reason: "failed: " + secret, Data: []byte("d " + secret), Raw: json.RawMessage(`{"k":"` + secret + `"}`), hidden: secret},
		Ptr:    &inner{Reason: secret},
		List:   []string{"a", secret},
		ByName: map[string]string{"k": secret},
		Any:    "x " + secret,
		Count:  3,
	}
	got, masked := redact.Value(r, orig)
	if !masked {
		t.Error("Value did not report the secrets it masked")
	}
	if b, _ := json.Marshal(got); strings.Contains(string(b), "sk-live") {
		t.Errorf("the copy still holds the secret: %s", b)
	}
	if got.Name != "op 1" || got.Count != 3 || got.List[0] != "a" || got.Inner.hidden != secret || !json.Valid(got.Inner.Raw) {
		t.Errorf("the copy lost what held no secret: %+v", got)
	}
	if orig.Inner.Reason != "failed: "+secret || orig.Ptr.Reason != secret || orig.List[1] != secret || orig.ByName["k"] != secret {
		t.Errorf("the original was changed: %+v", orig)
	}
	clean := result{Name: "op 2", List: []string{"b"}}
	if got, masked := redact.Value(r, clean); masked || got.Name != "op 2" || &got.List[0] != &clean.List[0] {
		t.Errorf("a value without a secret was copied: %+v", got)
	}
}

// TestHandlerMasksEveryAttribute: a log line holds no secret, whether it is
// in the message, a string, an error, a group or an attribute bound with
// With; the JSON and text handlers alike.
func TestHandlerMasksEveryAttribute(t *testing.T) {
	r := redact.New(secret)
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewJSONHandler(&buf, nil)
		if format == "text" {
			h = slog.NewTextHandler(&buf, nil)
		}
		logger := slog.New(r.Handler(h)).With("bound", "b "+secret)
		logger.Info("message "+secret, "s", secret, "err", fmt.Errorf("wrapped: %w", errors.New(url.QueryEscape(secret))),
			slog.Group("g", "inner", secret), "struct", inner{Reason: secret}, "n", 7)
		out := buf.String()
		if strings.Contains(out, "sk-live") || strings.Contains(out, url.QueryEscape(secret)) || strings.Count(out, redact.Mask) < 6 {
			t.Errorf("%s: %s, want every secret masked", format, out)
		}
		if !strings.Contains(out, "n=7") && !strings.Contains(out, `"n":7`) {
			t.Errorf("%s: %s, want the number kept", format, out)
		}
	}
}
