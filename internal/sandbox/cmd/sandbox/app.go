package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
)

// The sandbox's GitHub App (--github-app): its id and installation, the
// slug its bot writes as.
const (
	sandboxAppID           = 1
	sandboxAppInstallation = 1
	sandboxAppSlug         = "capstan-sandbox"
)

// serveApp makes sb's GitHub host a GitHub App with a new key, writes the
// private key to a file of its own (mode 0600), and returns env with the
// App's settings in place of GITHUB_TOKEN, and a function that removes the
// file.
func serveApp(sb *sandbox.Sandbox, env []string, lifetime time.Duration) ([]string, func(), error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.CreateTemp("", "capstan-sandbox-app-*.pem")
	if err != nil {
		return nil, nil, err
	}
	remove := func() { _ = os.Remove(f.Name()) }
	werr := pem.Encode(f, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := f.Close(); err != nil || werr != nil {
		remove()
		return nil, nil, fmt.Errorf("write the App's private key: %v", firstErr(werr, err))
	}
	sb.GitHub.SetApp(sandbox.GitHubApp{ID: sandboxAppID, Slug: sandboxAppSlug, PublicKey: &key.PublicKey,
		InstallationID: sandboxAppInstallation, TokenLifetime: lifetime})
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GITHUB_TOKEN=") {
			out = append(out, kv)
		}
	}
	out = append(out, fmt.Sprintf("CAPSTAN_GITHUB_APP_ID=%d", sandboxAppID), "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE="+f.Name())
	return out, remove, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
