package config

import (
	"encoding/base64"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// secretVars hold a secret as their whole value.
var secretVars = []string{
	"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN", "SLACK_BOT_TOKEN",
	"CAPSTAN_STREAM_TOKEN", "CAPSTAN_CODEC_AUTH", "CAPSTAN_GITHUB_APP_PRIVATE_KEY",
	// Read by the Temporal SDK's envconfig; held all the same.
	"TEMPORAL_API_KEY",
}

// urlVars are URLs whose user information and query values may hold a
// credential (a proxy's key in OPENAI_BASE_URL's query, say).
var urlVars = []string{"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GITHUB_API_URL", "SLACK_API_URL", "CAPSTAN_UI_URL", "CAPSTAN_STREAM_URL"}

// Secrets are the secret values of the environment the configuration was
// read from, for internal/redact: the keys and tokens, the GitHub App's
// private key (read from its file when given as one), each codec key
// (wherever in its pair it was written, so a pair given in the wrong
// order is a secret too), the ledger DSN's password, and the user
// information and query values of the configured URLs. Values are as they
// were given, read or not; redact ignores the short ones.
func (c Config) Secrets() []string {
	out := append([]string(nil), c.secrets...)
	if f := c.GitHubApp.PrivateKeyFile; f != "" {
		if b, err := os.ReadFile(f); err == nil {
			out = append(out, pemSecrets(string(b))...)
		}
	}
	return out
}

// readSecrets collects Secrets' values from the environment.
func (c *Config) readSecrets(getenv func(string) string) {
	for _, k := range secretVars {
		v := strings.TrimSpace(getenv(k))
		c.secrets = append(c.secrets, v)
		if k == "CAPSTAN_GITHUB_APP_PRIVATE_KEY" {
			c.secrets = append(c.secrets, pemSecrets(v)...)
		}
	}
	c.secrets = append(c.secrets, codecKeySecrets(getenv("CAPSTAN_CODEC_KEYS"))...)
	c.secrets = append(c.secrets, dsnPasswords(getenv("CAPSTAN_LEDGER_DSN"))...)
	for _, k := range urlVars {
		c.secrets = append(c.secrets, URLSecrets(getenv(k))...)
	}
}

// pemSecrets are the base64 lines of a PEM block and their concatenation,
// which an error may quote instead of the whole text.
func pemSecrets(pem string) []string {
	out := []string{pem}
	var body strings.Builder
	for _, line := range strings.Split(pem, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "-----") || strings.Contains(line, ":") {
			continue
		}
		out = append(out, line)
		body.WriteString(line)
	}
	return append(out, body.String())
}

// codecKeySecrets are the keys of CAPSTAN_CODEC_KEYS as written: the part
// after each colon, a pair without one whole, and the part before a colon
// when it is itself a key (the pair given key first).
func codecKeySecrets(v string) []string {
	out := []string{strings.TrimSpace(v)}
	for _, pair := range strings.Split(v, ",") {
		id, key, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok {
			out = append(out, strings.TrimSpace(pair))
			continue
		}
		out = append(out, strings.TrimSpace(key))
		if looksLikeCodecKey(strings.TrimSpace(id)) {
			out = append(out, strings.TrimSpace(id))
		}
	}
	return out
}

// looksLikeCodecKey reports whether s is a codec key in standard base64.
func looksLikeCodecKey(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// passwordParam is a password setting of a DSN, in its query or as
// key=value (as internal/ledger/ledgerdsn masks them).
var passwordParam = regexp.MustCompile(`(?i)(?:^|[?&;\s])(?:ssl)?(?:password|passwd|pwd)=('(?:[^'\\]|\\.)*'|[^&;\s]*)`)

// dsnPasswords are the password of a DSN: the user information's after
// its colon (up to the last '@' before the query, so a password holding an
// unescaped '@' or '/' is whole), escaped and not, and any password=
// parameter.
func dsnPasswords(dsn string) []string {
	var out []string
	if i := strings.Index(dsn, "://"); i >= 0 {
		head := dsn[i+len("://"):]
		if q := strings.IndexAny(head, "?#"); q >= 0 {
			head = head[:q]
		}
		if at := strings.LastIndexByte(head, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(head[:at], ":"); ok {
				out = append(out, pw)
				if u, err := url.PathUnescape(pw); err == nil {
					out = append(out, u)
				}
			}
		}
	}
	for _, m := range passwordParam.FindAllStringSubmatch(dsn, -1) {
		out = append(out, strings.Trim(m[1], "'"))
	}
	return out
}

// URLSecrets are what of a configured URL may be a credential: its user
// name and password, and every query value. A URL that does not parse
// yields its whole text.
func URLSecrets(raw string) []string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return []string{raw}
	}
	var out []string
	if u.User != nil {
		out = append(out, u.User.Username())
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw)
		}
	}
	for _, vs := range u.Query() {
		out = append(out, vs...)
	}
	// A value query parsing could not split (a stray ';') is masked whole.
	if u.RawQuery != "" {
		if _, err := url.ParseQuery(u.RawQuery); err != nil {
			out = append(out, u.RawQuery)
		}
	}
	return out
}
