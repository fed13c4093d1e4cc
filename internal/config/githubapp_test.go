package config

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitHubAppSettings: the worker acts as a personal token or as an App,
// never both; a bad id or key is one sentence naming the setting.
func TestGitHubAppSettings(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	file := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(file, []byte(pemText), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"OPENAI_API_KEY": "k"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" for no error about GitHub
	}{
		{"token", map[string]string{"GITHUB_TOKEN": "t"}, ""},
		{"app, key file", map[string]string{"CAPSTAN_GITHUB_APP_ID": "42", "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE": file}, ""},
		{"app, key text, installation", map[string]string{"CAPSTAN_GITHUB_APP_ID": "42", "CAPSTAN_GITHUB_APP_PRIVATE_KEY": pemText, "CAPSTAN_GITHUB_APP_INSTALLATION_ID": "7"}, ""},
		{"neither", map[string]string{}, "GITHUB_TOKEN is not set"},
		{"both", map[string]string{"GITHUB_TOKEN": "t", "CAPSTAN_GITHUB_APP_ID": "42", "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE": file}, "are both set"},
		{"bad id", map[string]string{"CAPSTAN_GITHUB_APP_ID": "my-app", "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE": file}, `CAPSTAN_GITHUB_APP_ID="my-app" is not a GitHub id`},
		{"no key", map[string]string{"CAPSTAN_GITHUB_APP_ID": "42"}, "private key is not"},
		{"missing file", map[string]string{"CAPSTAN_GITHUB_APP_ID": "42", "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE": file + ".nope"}, "cannot be read"},
		{"not a key", map[string]string{"CAPSTAN_GITHUB_APP_ID": "42", "CAPSTAN_GITHUB_APP_PRIVATE_KEY": "hello"}, "does not hold an RSA private key"},
		{"two keys", map[string]string{"CAPSTAN_GITHUB_APP_ID": "42", "CAPSTAN_GITHUB_APP_PRIVATE_KEY": pemText, "CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE": file}, "both set: give the App's private key one way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			err := FromEnv(func(k string) string { return env[k] }).ValidateWorker()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ValidateWorker: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ValidateWorker = %v, want %q", err, tc.want)
			case err != nil && (strings.Contains(err.Error(), "PRIVATE KEY-----") || strings.Count(err.Error(), ";") > 0):
				t.Fatalf("ValidateWorker = %v: want one sentence, without the key", err)
			}
		})
	}
}
