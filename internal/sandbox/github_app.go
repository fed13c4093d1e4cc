package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The GitHub fake as a GitHub App's host: the Apps API endpoints an App's
// worker calls, JWTs checked against the App's public key, and short-lived
// installation tokens that every other endpoint refuses once expired.

// GitHubApp is the App the fake knows (SetApp).
type GitHubApp struct {
	ID   int64  // the App's id: the JWT's issuer
	Slug string // its bot writes as "<Slug>[bot]"
	// PublicKey verifies the App's JWTs (RS256).
	PublicKey *rsa.PublicKey
	// InstallationID is the installation every repository answers.
	InstallationID int64
	// TokenLifetime is how long an installation token lives; 0 is an hour,
	// as on GitHub.
	TokenLifetime time.Duration
}

// installationTokenPrefix starts the installation tokens the fake issues,
// as GitHub's do.
const installationTokenPrefix = "ghs_"

// appState is the fake's App and the installation tokens it issued;
// guarded by the GitHub's dataMu.
type appState struct {
	app    *GitHubApp
	tokens map[string]appToken // by token
}

// appToken is an installation token the fake issued.
type appToken struct {
	expires time.Time
	repos   []string // the lower-case names it may reach; nil: every repository
}

type ghLoginKey struct{}

// SetApp makes the fake serve app: GET /app, GET /repos/{o}/{r}/installation,
// GET /app/installations/{id} and POST /app/installations/{id}/access_tokens
// take the App's JWT (refused with 401 when its signature, issuer or times
// are wrong), and the tokens the last issues are its bot's: what is written
// with one is authored by AppLogin, an expired or unknown one is refused
// with 401 "Bad credentials" on every endpoint, and one asked for some
// repositories answers 404 on the others.
func (g *GitHub) SetApp(app GitHubApp) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	if app.TokenLifetime <= 0 {
		app.TokenLifetime = time.Hour
	}
	g.apps.app, g.apps.tokens = &app, map[string]appToken{}
}

// AppLogin is the login of the App's bot, "<slug>[bot]"; "" without an App.
func (g *GitHub) AppLogin() string {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	if g.apps.app == nil {
		return ""
	}
	return g.apps.app.Slug + "[bot]"
}

// AppTokens returns every installation token issued so far with its
// expiry, so a test can look for them where they must not be.
func (g *GitHub) AppTokens() map[string]time.Time {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	out := make(map[string]time.Time, len(g.apps.tokens))
	for k, v := range g.apps.tokens {
		out[k] = v.expires
	}
	return out
}

// checkInstallationToken refuses, with 401, a request carrying an
// installation token the fake did not issue or that has expired, answers
// 404 Not Found, as GitHub does, to one on a repository the token was not
// requested for, and marks one it takes with its bot's login. Other tokens
// pass unchanged.
func (g *GitHub) checkInstallationToken(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	tok := bearer(r)
	if !strings.HasPrefix(tok, installationTokenPrefix) {
		return r, true
	}
	g.dataMu.Lock()
	t, known := g.apps.tokens[tok]
	ok := known && g.now().Before(t.expires)
	if repo := r.PathValue("repo"); ok && t.repos != nil && repo != "" && !slices.Contains(t.repos, strings.ToLower(repo)) {
		g.dataMu.Unlock()
		ghError(w, http.StatusNotFound, "Not Found")
		return nil, false
	}
	login := ""
	if g.apps.app != nil {
		login = g.apps.app.Slug + "[bot]"
	}
	if !ok {
		g.stats.RefusedTokens++
	}
	g.dataMu.Unlock()
	if !ok {
		ghError(w, http.StatusUnauthorized, "Bad credentials")
		return nil, false
	}
	return r.WithContext(context.WithValue(r.Context(), ghLoginKey{}, login)), true
}

// checkJWT answers 401 unless the request carries a JWT of the App that is
// signed with its key, issued by its id, already issued and not expired,
// and expiring at most 10 minutes from now (GitHub's rules).
func (g *GitHub) checkJWT(w http.ResponseWriter, r *http.Request) (*GitHubApp, bool) {
	g.dataMu.Lock()
	app, now := g.apps.app, g.now()
	g.dataMu.Unlock()
	if app == nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return nil, false
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(bearer(r), &claims, func(*jwt.Token) (any, error) { return app.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(strconv.FormatInt(app.ID, 10)),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(func() time.Time { return now }))
	if err == nil && claims.ExpiresAt.After(now.Add(10*time.Minute+time.Second)) {
		err = fmt.Errorf("expires more than 10 minutes from now")
	}
	if err != nil {
		ghError(w, http.StatusUnauthorized, "A JSON web token could not be decoded: "+err.Error())
		return nil, false
	}
	return app, true
}

// getApp answers GET /app: the App the JWT authenticates.
func (g *GitHub) getApp(w http.ResponseWriter, r *http.Request) {
	app, ok := g.checkJWT(w, r)
	if !ok {
		return
	}
	writeJSONBody(w, http.StatusOK, map[string]any{"id": app.ID, "slug": app.Slug, "name": app.Slug,
		"owner": ghUser(GitHubLogin), "html_url": ghBases(r).web + "apps/" + app.Slug})
}

// getRepoInstallation answers GET /repos/{owner}/{repo}/installation: the
// App's one installation, on every repository.
func (g *GitHub) getRepoInstallation(w http.ResponseWriter, r *http.Request) {
	app, ok := g.checkJWT(w, r)
	if !ok {
		return
	}
	writeJSONBody(w, http.StatusOK, map[string]any{"id": app.InstallationID, "app_id": app.ID,
		"app_slug": app.Slug, "account": ghUser(r.PathValue("owner")), "target_type": "Organization"})
}

// installationPermissions are the permissions the fake's installation
// has: a token asked for none gets these.
var installationPermissions = map[string]string{"contents": "write", "pull_requests": "write", "issues": "write", "metadata": "read"}

// checkInstallation checks the App's JWT and that the path's {id} is its
// installation, answering 401 or 404 as GitHub does when not.
func (g *GitHub) checkInstallation(w http.ResponseWriter, r *http.Request) (app *GitHubApp, ok bool) {
	if app, ok = g.checkJWT(w, r); !ok {
		return app, false
	}
	if r.PathValue("id") != strconv.FormatInt(app.InstallationID, 10) {
		ghError(w, http.StatusNotFound, "Not Found")
		return app, false
	}
	return app, true
}

// getInstallation answers GET /app/installations/{id}: the App's one
// installation.
func (g *GitHub) getInstallation(w http.ResponseWriter, r *http.Request) {
	app, ok := g.checkInstallation(w, r)
	if !ok {
		return
	}
	writeJSONBody(w, http.StatusOK, map[string]any{"id": app.InstallationID, "app_id": app.ID, "app_slug": app.Slug,
		"account": ghUser(GitHubLogin), "target_type": "Organization", "permissions": installationPermissions})
}

// createInstallationToken answers POST /app/installations/{id}/access_tokens
// with a new token of TokenLifetime, for the repositories and with the
// permissions the body asks for (every repository and the installation's
// permissions when it names none). A permission
// the installation lacks, or a level above its, is refused with 422, as
// GitHub does.
func (g *GitHub) createInstallationToken(w http.ResponseWriter, r *http.Request) {
	app, ok := g.checkInstallation(w, r)
	if !ok {
		return
	}
	var body struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFakeRequestBytes)); err != nil ||
		len(data) > 0 && json.Unmarshal(data, &body) != nil {
		ghError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	for perm, level := range body.Permissions {
		if has := installationPermissions[perm]; has == "" || level == "write" && has != "write" {
			ghError(w, http.StatusUnprocessableEntity, fmt.Sprintf("The permissions requested are not granted to this installation: %s: %s", perm, level))
			return
		}
	}
	perms := orDefault(body.Permissions, installationPermissions)
	var repos []string
	for _, name := range body.Repositories {
		repos = append(repos, strings.ToLower(name))
	}
	var b [20]byte
	_, _ = rand.Read(b[:])
	tok := installationTokenPrefix + hex.EncodeToString(b[:])
	g.dataMu.Lock()
	exp := g.now().Add(app.TokenLifetime)
	g.apps.tokens[tok] = appToken{expires: exp, repos: repos}
	g.stats.AppTokensIssued++
	g.dataMu.Unlock()
	answer := map[string]any{"token": tok, "expires_at": exp.UTC().Format(time.RFC3339Nano),
		"permissions": perms, "repository_selection": "all"}
	if repos != nil {
		answer["repository_selection"] = "selected"
	}
	writeJSONBody(w, http.StatusCreated, answer)
}

// orDefault is m, or def when m is empty.
func orDefault(m, def map[string]string) map[string]string {
	if len(m) == 0 {
		return def
	}
	return m
}

// appPathStart is where the Apps API path (/app, /app/installations/...)
// begins in p, under whatever mount prefix; -1 when p is not one.
func appPathStart(p string) int {
	if strings.HasSuffix(p, "/app") {
		return len(p) - len("/app")
	}
	return strings.Index(p, "/app/installations/")
}

// bearer is the request's token, whatever its scheme.
func bearer(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	for _, scheme := range []string{"Bearer ", "token ", "Basic "} {
		if t, ok := strings.CutPrefix(auth, scheme); ok {
			return t
		}
	}
	return auth
}
