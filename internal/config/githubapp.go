package config

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// GitHubApp is the GitHub App a worker acts as instead of a personal
// GITHUB_TOKEN. Its zero value means none. The private key stays here and
// in the worker's token source (internal/ghapp), never in a workflow input.
type GitHubApp struct {
	// ID (CAPSTAN_GITHUB_APP_ID) is the App's numeric id; 0 when unset.
	ID int64
	// PrivateKeyFile (CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE) is the path of
	// the App's PEM private key; PrivateKey (CAPSTAN_GITHUB_APP_PRIVATE_KEY)
	// is the PEM itself. At most one is set.
	PrivateKeyFile, PrivateKey string
	// InstallationID (CAPSTAN_GITHUB_APP_INSTALLATION_ID) is the
	// installation every call uses; 0 looks it up per repository.
	InstallationID int64

	// given records that an id was given, even one that could not be read
	// (its problem is then reported instead of its absence).
	given bool
}

// Set reports whether any of the App's settings is given.
func (a GitHubApp) Set() bool {
	return a.given || a.ID != 0 || a.PrivateKeyFile != "" || a.PrivateKey != "" || a.InstallationID != 0
}

// Key reads and parses the App's private key, with one sentence naming the
// setting when it cannot.
func (a GitHubApp) Key() (*rsa.PrivateKey, error) {
	var pem []byte
	from := "CAPSTAN_GITHUB_APP_PRIVATE_KEY"
	switch {
	case a.PrivateKeyFile != "" && a.PrivateKey != "":
		return nil, errors.New("CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE and CAPSTAN_GITHUB_APP_PRIVATE_KEY are both set: give the App's private key one way")
	case a.PrivateKeyFile != "":
		from = "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE=" + a.PrivateKeyFile
		b, err := os.ReadFile(a.PrivateKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s cannot be read: %w", from, err)
		}
		pem = b
	case a.PrivateKey != "":
		pem = []byte(a.PrivateKey)
	default:
		return nil, errors.New("CAPSTAN_GITHUB_APP_ID is set but the App's private key is not: set CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE to the .pem file GitHub gave for the App (or CAPSTAN_GITHUB_APP_PRIVATE_KEY to its text)")
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(pem)
	if err != nil {
		// The parser's error quotes nothing of the key.
		return nil, fmt.Errorf("%s does not hold an RSA private key in PEM, as GitHub gives for an App: %v", from, err)
	}
	return key, nil
}

// readGitHubApp reads the App's settings, keeping unreadable ids as
// problems.
func (c *Config) readGitHubApp(getenv func(string) string) {
	id := func(key string) int64 {
		v := strings.TrimSpace(getenv(key))
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			c.problems = append(c.problems, fmt.Errorf("%s=%q is not a GitHub id (a whole number of at least 1, shown on the App's settings page)", key, v))
			return 0
		}
		return n
	}
	c.GitHubApp = GitHubApp{
		ID:             id("CAPSTAN_GITHUB_APP_ID"),
		PrivateKeyFile: strings.TrimSpace(getenv("CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE")),
		PrivateKey:     strings.TrimSpace(getenv("CAPSTAN_GITHUB_APP_PRIVATE_KEY")),
		InstallationID: id("CAPSTAN_GITHUB_APP_INSTALLATION_ID"),
		given:          strings.TrimSpace(getenv("CAPSTAN_GITHUB_APP_ID")) != "",
	}
}

// checkGitHubAuth is the worker's check of how it acts on GitHub: a
// personal token, or an App whose id and key are given and whose key
// parses — never both, never neither.
func (c Config) checkGitHubAuth() error {
	app := c.GitHubApp
	switch {
	case c.GitHubToken != "" && app.Set():
		return errors.New("GITHUB_TOKEN and CAPSTAN_GITHUB_APP_* are both set: a worker acts on GitHub either with a personal token or as a GitHub App, so unset one of them")
	case c.GitHubToken != "":
		return nil
	case !app.Set():
		return errors.New("GITHUB_TOKEN is not set: set it to a token that may push branches and open pull requests, or set CAPSTAN_GITHUB_APP_ID and its private key to act as a GitHub App (or, offline, point the worker at the sandbox program: make demo)")
	case app.ID == 0 && app.given:
		return nil // its problem says why
	case app.ID == 0:
		return errors.New("CAPSTAN_GITHUB_APP_ID is not set, though other CAPSTAN_GITHUB_APP_* settings are: set it to the App's numeric id")
	}
	_, err := app.Key()
	return err
}
