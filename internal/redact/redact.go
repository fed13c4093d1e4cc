// Package redact takes the secrets a process holds out of the text it lets
// go: log lines, activity failures and results, the ledger's error column,
// configuration errors. One Redactor is built from every secret value the
// process was given (API keys, tokens, private keys, codec keys, passwords
// and query values of configured URLs, the values an MCP file's ${VAR}
// expands to) and replaces each of them, in every form an error is likely
// to quote it in, with Mask.
//
// A value shorter than MinLen is not treated as a secret: a short value
// (a port, "true", a test key) would mask ordinary words and numbers, and
// no real credential is that short.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Mask replaces a secret.
const Mask = "[redacted]"

// MinLen is the length from which a value counts as a secret.
const MinLen = 8

// Redactor replaces the secrets it was built from. A nil *Redactor
// replaces nothing, so a process without secrets needs none.
type Redactor struct {
	replacer *strings.Replacer
}

// New returns a redactor of secrets: each one of MinLen bytes or more is
// matched as it is, URL-escaped (url.QueryEscape, url.PathEscape), in
// base64 (standard and URL alphabets, padded and raw) and as it appears
// inside a quoted string (strconv.Quote, JSON). Empty and short values are
// ignored; New of none of MinLen or more is nil.
func New(secrets ...string) *Redactor {
	forms := map[string]bool{}
	for _, s := range secrets {
		if len(s) < MinLen {
			continue
		}
		for _, f := range formsOf(s) {
			if len(f) >= MinLen {
				forms[f] = true
			}
		}
	}
	if len(forms) == 0 {
		return nil
	}
	// At one position the replacer tries its patterns in order: the
	// longest first, so a secret that another one starts is masked whole.
	ordered := make([]string, 0, len(forms))
	for f := range forms {
		ordered = append(ordered, f)
	}
	slices.SortFunc(ordered, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	pairs := make([]string, 0, 2*len(ordered))
	for _, f := range ordered {
		pairs = append(pairs, f, Mask)
	}
	return &Redactor{replacer: strings.NewReplacer(pairs...)}
}

// formsOf are the ways s may be written in text that quotes it.
func formsOf(s string) []string {
	b := []byte(s)
	quoted := strconv.Quote(s)
	js, _ := json.Marshal(s) // a string always encodes
	return []string{
		s,
		url.QueryEscape(s),
		url.PathEscape(s),
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		quoted[1 : len(quoted)-1],
		string(js[1 : len(js)-1]),
	}
}

// String is s with every secret masked.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	return r.replacer.Replace(s)
}

// Error is err when its text holds no secret, else an error whose text is
// err's with the secrets masked. That error wraps nothing: whatever walks
// an error's chain (Temporal's failure converter does) would find the
// secret again in a cause.
func (r *Redactor) Error(err error) error {
	if r == nil || err == nil {
		return err
	}
	text := err.Error()
	if red := r.String(text); red != text {
		return errors.New(red)
	}
	return err
}

// Holds reports whether s holds a secret.
func (r *Redactor) Holds(s string) bool {
	return r.String(s) != s
}
