package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// LiveStream is where and how a worker serves the text of its model
// attempts as they stream.
type LiveStream struct {
	// Addr (CAPSTAN_STREAM_ADDR) is the host:port to listen on; empty
	// (the variable set empty) serves nothing.
	Addr string
	// URL (CAPSTAN_STREAM_URL) is the base URL followers use to reach
	// this worker; empty means "http://" and the address listened on, or
	// this host's name when Addr has no host.
	URL string
	// Token (CAPSTAN_STREAM_TOKEN) is the bearer token every follower
	// must present; empty serves loopback clients only.
	Token string
	// MaxConns (CAPSTAN_STREAM_MAX_CONNS) caps the open connections.
	MaxConns int
	// WriteTimeout (CAPSTAN_STREAM_WRITE_TIMEOUT) bounds every write.
	WriteTimeout time.Duration
}

// LiveStreamFromLookupEnv reads CAPSTAN_STREAM_ADDR, CAPSTAN_STREAM_URL,
// CAPSTAN_STREAM_TOKEN, CAPSTAN_STREAM_MAX_CONNS and
// CAPSTAN_STREAM_WRITE_TIMEOUT, failing with one sentence on a value the
// worker cannot use.
func LiveStreamFromLookupEnv(lookup func(string) (string, bool)) (LiveStream, error) {
	ls := LiveStream{Addr: DefaultStreamAddr, MaxConns: DefaultStreamMaxConns, WriteTimeout: DefaultStreamWriteTimeout}
	if v, ok := lookup("CAPSTAN_STREAM_ADDR"); ok {
		ls.Addr = strings.TrimSpace(v)
	}
	if err := checkListenAddr(ls.Addr); err != nil {
		return ls, fmt.Errorf("CAPSTAN_STREAM_ADDR=%q %v (such as %s, or :9465 for every interface; set it empty to serve no live stream)",
			ls.Addr, err, DefaultStreamAddr)
	}
	v, _ := lookup("CAPSTAN_STREAM_URL")
	ls.URL = strings.TrimRight(strings.TrimSpace(v), "/")
	if ls.URL != "" {
		u, err := url.Parse(ls.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return ls, fmt.Errorf("CAPSTAN_STREAM_URL=%q is not an http(s) URL such as http://worker-1:9465", v)
		}
	}
	ls.Token = streamToken(lookup)
	if v, _ := lookup("CAPSTAN_STREAM_MAX_CONNS"); strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return ls, fmt.Errorf("CAPSTAN_STREAM_MAX_CONNS=%q is not a whole number of at least 1 (default %d)", v, DefaultStreamMaxConns)
		}
		ls.MaxConns = n
	}
	if v, _ := lookup("CAPSTAN_STREAM_WRITE_TIMEOUT"); strings.TrimSpace(v) != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 {
			return ls, fmt.Errorf("CAPSTAN_STREAM_WRITE_TIMEOUT=%q is not a positive Go duration such as 10s (default %s)", v, DefaultStreamWriteTimeout)
		}
		ls.WriteTimeout = d
	}
	return ls, nil
}

// streamToken is CAPSTAN_STREAM_TOKEN, which the worker requires of its
// followers and `starter follow` presents.
func streamToken(lookup func(string) (string, bool)) string {
	v, _ := lookup("CAPSTAN_STREAM_TOKEN")
	return strings.TrimSpace(v)
}

// AdvertisedURL is the URL followers use, given the address the worker
// actually listens on (its port, when Addr asked for port 0).
func (ls LiveStream) AdvertisedURL(bound string) string {
	if ls.URL != "" {
		return ls.URL
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return "http://" + bound
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = Hostname()
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Loopback reports whether Addr listens on this machine's loopback
// interface only.
func (ls LiveStream) Loopback() bool {
	host, _, err := net.SplitHostPort(ls.Addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// StreamOrigins parses CAPSTAN_STREAM_ORIGINS, the origins `starter
// follow` sends CAPSTAN_STREAM_TOKEN to besides loopback ones: URLs or
// scheme://host[:port], separated by commas, as OriginOf writes them.
func StreamOrigins(v string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(v, ",") {
		if strings.TrimSpace(raw) == "" {
			continue
		}
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			return nil, fmt.Errorf("CAPSTAN_STREAM_ORIGINS: %q is not an http:// or https:// origin such as https://worker-1.internal:9465", strings.TrimSpace(raw))
		}
		out = append(out, OriginOf(u))
	}
	return out, nil
}

// OriginOf is u's origin as the follower compares it: scheme://host:port,
// lower case, with the scheme's port when u gives none.
func OriginOf(u *url.URL) string {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
