package github

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	gogithub "github.com/google/go-github/v62/github"
)

// NewClient returns a go-github client for the REST API at baseURL, used
// exactly as given (a trailing slash is added if missing), so the same binary
// talks to api.github.com, a GitHub Enterprise ".../api/v3/", a proxy or the
// sandbox. An empty baseURL means https://api.github.com/. The token, when not
// empty, is sent as a bearer token. hc may be nil.
func NewClient(baseURL, token string, hc *http.Client) (*gogithub.Client, error) {
	c := gogithub.NewClient(hc)
	if token != "" {
		c = c.WithAuthToken(token)
	}
	if baseURL == "" {
		return c, nil
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("github client: parse base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("github client: base URL %q must be an absolute http(s) URL without query or fragment", baseURL)
	}
	// Set BaseURL directly: WithEnterpriseURLs would append "api/v3/".
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	c.BaseURL = u
	return c, nil
}
