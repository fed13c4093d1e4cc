package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// LiveStream is where a worker serves the text of its model attempts as
// they stream.
type LiveStream struct {
	// Addr (CAPSTAN_STREAM_ADDR) is the host:port to listen on; empty
	// (the variable set empty) serves nothing.
	Addr string
	// URL (CAPSTAN_STREAM_URL) is the base URL followers use to reach
	// this worker; empty means "http://" and the address listened on, or
	// this host's name when Addr has no host.
	URL string
}

// LiveStreamFromLookupEnv reads CAPSTAN_STREAM_ADDR and CAPSTAN_STREAM_URL,
// failing with one sentence on a value the worker cannot use.
func LiveStreamFromLookupEnv(lookup func(string) (string, bool)) (LiveStream, error) {
	ls := LiveStream{Addr: DefaultStreamAddr}
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
	return ls, nil
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
