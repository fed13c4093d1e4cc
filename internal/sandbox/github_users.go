package sandbox

import (
	"crypto/sha1"
	"net/http"
	"strings"
)

// Who wrote what on the GitHub fake: the user of the request's token.

// GitHubLogin is the login of the sandbox's own account: the author of what
// is written with any token other than a SandboxUserToken.
const GitHubLogin = "capstan-sandbox-bot"

// sandboxUserPrefix starts a token that names its user (SandboxUserToken).
const sandboxUserPrefix = "sandbox-user:"

// SandboxUserToken is a token the GitHub and Slack fakes take as login's: a
// test writes as another user with it. login must not be empty.
func SandboxUserToken(login string) string { return sandboxUserPrefix + login }

// ghLogin is the login of the user the request's token belongs to, and
// whether it carried a token at all.
func ghLogin(r *http.Request) (string, bool) {
	if login, ok := r.Context().Value(ghLoginKey{}).(string); ok && login != "" {
		return login, true // an installation token's: its App's bot
	}
	auth := r.Header.Get("Authorization")
	token := auth
	for _, scheme := range []string{"Bearer ", "token ", "Basic "} {
		if t, ok := strings.CutPrefix(auth, scheme); ok {
			token = t
			break
		}
	}
	if login, ok := strings.CutPrefix(token, sandboxUserPrefix); ok && login != "" {
		return login, true
	}
	return GitHubLogin, token != ""
}

// getAuthenticatedUser answers GET /user: the user of the request's token,
// or 401 without one, as GitHub does.
func (g *GitHub) getAuthenticatedUser(w http.ResponseWriter, r *http.Request) {
	login, authed := ghLogin(r)
	if !authed {
		ghError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	u := ghBases(r)
	writeJSONBody(w, http.StatusOK, map[string]any{"login": login, "id": ghUserID(login), "type": "User",
		"html_url": u.web + login, "url": u.api + "users/" + login})
}

// ghUserID is a stable numeric id for login (GitHub logins are
// case-insensitive).
func ghUserID(login string) int64 {
	h := sha1.Sum([]byte(strings.ToLower(login)))
	return int64(h[0])<<16 | int64(h[1])<<8 | int64(h[2]) + 1
}
