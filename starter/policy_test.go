package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// starter runs the starter with args and env, and returns its exit status,
// stdout and stderr.
func starter(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// writeFile writes text to a file in a fresh directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const starterPolicy = `rules:
  - name: prod-pull-requests
    tool: github_create_pull_request
    when: labels[?"env"].orValue("") == "prod"
    effect: require_approval
  - name: no-vendor
    path: vendor/**
    effect: deny
    reason: vendored code is updated by the dependency bot
`

// `starter policy check` prints a good file's rules, one a line, and exit
// status 0; a bad file is one sentence on stderr naming the rule and the
// line, and exit status 2.
func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	good := writeFile(t, starterPolicy)
	code, out, errOut := starter(t, nil, "policy", "check", good)
	want := `prod-pull-requests (line 2): require_approval tool=github_create_pull_request when labels[?"env"].orValue("") == "prod"
no-vendor (line 6): deny path=vendor/**
` + good + `: 2 rules, decided beside the defaults: default/repository, default/base-branch, default/branch-prefix, default/workflow-files, default/own-branch, default/read, default/allow
`
	if code != 0 || out != want || errOut != "" {
		t.Errorf("check of a good file: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}

	bad := writeFile(t, strings.Replace(starterPolicy, "effect: deny", "effect: refuse", 1))
	code, out, errOut = starter(t, nil, "policy", "check", bad)
	wantErr := "starter: policy file " + bad + `, line 8, rule "no-vendor": effect "refuse" is none of allow, deny, require_approval` + "\n"
	if code != 2 || out != "" || errOut != wantErr {
		t.Errorf("check of a bad file: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, wantErr)
	}

	misspelt := writeFile(t, strings.Replace(starterPolicy, "tool: github_create_pull_request", "tool: github_create_pul_request", 1))
	code, out, errOut = starter(t, nil, "policy", "check", misspelt)
	wantErr = "starter: policy file " + misspelt + `, line 3, rule "prod-pull-requests": tool "github_create_pul_request" matches none of this worker's tools (`
	if code != 2 || out != "" || !strings.HasPrefix(errOut, wantErr) || strings.Count(errOut, "\n") != 1 {
		t.Errorf("check of a file naming no tool: exit %d, stdout %q, stderr %q; want exit 2 and one line starting %q", code, out, errOut, wantErr)
	}

	code, _, errOut = starter(t, nil, "policy", "check", filepath.Join(t.TempDir(), "missing.yaml"))
	if code != 2 || !strings.Contains(errOut, "cannot be read: no such file or directory") {
		t.Errorf("check of a missing file: exit %d, stderr %q", code, errOut)
	}
}

// releasePolicy lifts default/base-branch for writes to release branches.
const releasePolicy = `rules:
  - name: release-fixes
    tool: github_put_file
    branch: release/*
    override: default/base-branch
    effect: allow
`

// `starter policy explain` prints the decision, the rule, its layer and
// the reason of one call: the file decided as a worker's own, beside the
// defaults, so its override lifts a default as on a worker;
// CAPSTAN_POLICY and CAPSTAN_BRANCH_PREFIX stand in for --file and
// --branch-prefix.
func TestPolicyExplain(t *testing.T) {
	t.Parallel()
	file := writeFile(t, starterPolicy)
	text := sha256.Sum256([]byte(starterPolicy))
	sum := hex.EncodeToString(text[:6])
	release := writeFile(t, releasePolicy)
	text = sha256.Sum256([]byte(releasePolicy))
	releaseSum := hex.EncodeToString(text[:6])
	const attrsPolicy = "rules:\n  - name: no-ops-tickets\n    tool: tickets_create\n    when: attributes[\"project\"] == \"OPS\"\n    effect: deny\n    reason: OPS takes no tickets from tasks\n"
	attrs := writeFile(t, attrsPolicy)
	text = sha256.Sum256([]byte(attrsPolicy))
	attrsSum := hex.EncodeToString(text[:6])
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		out  string
	}{
		{"another repository", nil,
			[]string{"--tool", "github_create_branch", "--repo", "acme/other", "--branch", "capstan/x", "--from", "main", "--task-repo", "acme/payments"},
			0, "decision: deny\nrule:     default/repository\nlayer:    default\nreason:   acme/other is outside this task's repositories: acme/payments\n"},
		{"a branch without the configured prefix", map[string]string{"CAPSTAN_BRANCH_PREFIX": "bot/"},
			[]string{"--tool", "github_create_branch", "--repo", "acme/payments", "--branch", "capstan/x", "--task-repo", "acme/payments"},
			0, "decision: deny\nrule:     default/branch-prefix\nlayer:    default\nreason:   branch capstan/x does not start with bot/, which every branch this task creates must: name it bot/capstan/x\n"},
		{"the base branch", nil,
			[]string{"--tool", "github_put_file", "--repo", "acme/payments", "--branch", "release", "--path", "a.go", "--task-repo", "acme/payments", "--base", "release"},
			0, "decision: deny\nrule:     default/base-branch\nlayer:    default\nreason:   release is this task's base branch, which it never writes to: write to a branch starting with capstan/ and open a pull request into release\n"},
		{"a file rule by label", nil,
			[]string{"--file", file, "--tool", "github_create_pull_request", "--repo", "acme/payments", "--branch", "capstan/x", "--into", "main",
				"--task-repo", "acme/payments", "--label", "env=prod"},
			0, "decision: require_approval\nrule:     prod-pull-requests\nlayer:    worker " + file + "@" + sum + "\nreason:   rule prod-pull-requests (line 2) requires a person's approval of github_create_pull_request\n"},
		{"the file from CAPSTAN_POLICY", map[string]string{"CAPSTAN_POLICY": file},
			[]string{"--tool", "github_put_file", "--repo", "acme/payments", "--branch", "capstan/x", "--path", "vendor/lib/a.go", "--task-repo", "acme/payments",
				"--created-branch", "capstan/x"},
			0, "decision: deny\nrule:     no-vendor\nlayer:    worker " + file + "@" + sum + "\nreason:   vendored code is updated by the dependency bot\n"},
		{"the worker's override lifts its default", nil,
			[]string{"--file", release, "--tool", "github_put_file", "--repo", "acme/payments", "--branch", "release/v2", "--path", "a.go",
				"--task-repo", "acme/payments", "--base", "release/v2"},
			0, "decision: allow\nrule:     release-fixes\nlayer:    worker " + release + "@" + releaseSum + "\nreason:   rule release-fixes (line 2) allows github_put_file\n"},
		{"and no other", nil,
			[]string{"--file", release, "--tool", "github_put_file", "--repo", "acme/other", "--branch", "release/v2", "--path", "a.go",
				"--task-repo", "acme/payments", "--base", "release/v2"},
			0, "decision: deny\nrule:     default/repository\nlayer:    default\nreason:   acme/other is outside this task's repositories: acme/payments\n"},
		{"a branch the task did not create", nil,
			[]string{"--tool", "github_put_file", "--repo", "acme/payments", "--branch", "release/v2", "--path", "VERSION", "--task-repo", "acme/payments",
				"--created-branch", "capstan/x"},
			0, "decision: deny\nrule:     default/own-branch\nlayer:    default\nreason:   release/v2 is not a branch this task created (github_create_branch, starting with capstan/), and it writes only onto those: create one and write there\n"},
		{"a branch the task created", nil,
			[]string{"--tool", "github_put_file", "--repo", "acme/payments", "--branch", "capstan/x", "--path", "a.go", "--task-repo", "acme/payments",
				"--created-branch", "capstan/x"},
			0, "decision: allow\nrule:     default/allow\nlayer:    default\nreason:   no rule refuses it: this task writes to acme/payments except its base branch main, onto branches it created starting with capstan/, and not under .github/ nor to a root action.yml\n"},
		{"a branch --allow-branch names", nil,
			[]string{"--tool", "github_put_file", "--repo", "acme/payments", "--branch", "gh-pages", "--path", "index.html", "--task-repo", "acme/payments",
				"--allow-branch", "gh-pages"},
			0, "decision: allow\nrule:     default/allow\nlayer:    default\nreason:   no rule refuses it: this task writes to acme/payments except its base branch main, onto branches it created starting with capstan/ or that --allow-branch names (gh-pages), and not under .github/ nor to a root action.yml\n"},
		{"an MCP tool with its class", nil, []string{"--tool", "search", "--server", "docs", "--class", "read_only"},
			0, "decision: allow\nrule:     default/read\nlayer:    default\nreason:   search only reads, which this policy allows\n"},
		{"an MCP tool without its class", nil, []string{"--tool", "search", "--server", "docs"}, 2, ""},
		{"no tool", nil, []string{"--repo", "acme/payments"}, 2, ""},
		{"a bad label", nil, []string{"--tool", "github_comment", "--label", "env"}, 2, ""},
		{"a rule on a tool's attributes", nil, []string{"--file", attrs, "--tool", "tickets_create", "--class", "unsafe", "--attribute", "project=OPS"},
			0, "decision: deny\nrule:     no-ops-tickets\nlayer:    worker " + attrs + "@" + attrsSum + "\nreason:   OPS takes no tickets from tasks\n"},
		{"another attribute", nil, []string{"--file", attrs, "--tool", "tickets_create", "--class", "unsafe", "--attribute", "project=DEV"},
			0, "decision: allow\nrule:     default/allow\nlayer:    default\nreason:   no rule refuses it: this task writes to none (it was sent to no repository) except its base branch main, onto branches it created starting with capstan/, and not under .github/ nor to a root action.yml\n"},
		{"a bad attribute", nil, []string{"--tool", "github_comment", "--attribute", "project"}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := starter(t, tc.env, append([]string{"policy", "explain"}, tc.args...)...)
			if code != tc.code || out != tc.out {
				t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant exit %d, stdout:\n%s", code, out, errOut, tc.code, tc.out)
			}
			if tc.code == 2 && (!strings.HasPrefix(errOut, "starter: ") || strings.Count(errOut, "\n") != 1) {
				t.Errorf("stderr %q is not one line", errOut)
			}
		})
	}
}
