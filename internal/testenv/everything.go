package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EverythingVar names the variable that points the tests at the reference
// MCP server @modelcontextprotocol/server-everything, a program capstan did
// not write.
const EverythingVar = "CAPSTAN_MCP_EVERYTHING"

// EverythingServer returns the command that starts the pinned
// server-everything: $CAPSTAN_MCP_EVERYTHING, else
// .bin/mcp-everything/mcp-server-everything in the repository (where
// scripts/mcp-everything.sh installs it), else mcp-server-everything on
// PATH. Without one the test is skipped, saying how to install it, except
// under CI=true, where .ci/run installs it and its absence fails the test:
// CI never passes by skipping the tests against a server capstan did not
// write.
func EverythingServer(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(EverythingVar); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s=%s: %v", EverythingVar, bin, err)
		}
		return bin
	}
	if bin := filepath.Join(RepoRoot(), ".bin", "mcp-everything", "mcp-server-everything"); fileExists(bin) {
		return bin
	}
	if bin, err := exec.LookPath("mcp-server-everything"); err == nil {
		return bin
	}
	const how = "no mcp-server-everything: install the pinned one with `scripts/mcp-everything.sh` (needs node and npm), or set " + EverythingVar + " to its binary"
	if os.Getenv("CI") == "true" {
		t.Fatal(how + " (CI=true: .ci/run installs it, and the tests against it never skip in CI)")
	}
	t.Skip(how)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
