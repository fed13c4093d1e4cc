package github_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// offlineTools have no client, as in workflow code: Identify must not need one.
func offlineTools(t *testing.T) *tool.Registry {
	t.Helper()
	return tool.NewRegistry(githubtools.Tools(nil)...)
}

func TestExecuteWithoutClientSendsNothing(t *testing.T) {
	impl, _ := offlineTools(t).Get("github_get_file")
	_, err := impl.Execute(context.Background(), tool.Call{OperationID: "op", Arguments: json.RawMessage(`{"repo":"a/b","path":"x"}`)})
	if tool.Classify(err) != tool.VerdictFailed {
		t.Errorf("Execute without a client: %v → %q", err, tool.Classify(err))
	}
}

func identify(t *testing.T, r *tool.Registry, name, args string) (tool.Identity, error) {
	t.Helper()
	impl, err := r.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return impl.Identify(json.RawMessage(args))
}

func TestIdentifyRejectsBadArguments(t *testing.T) {
	r := offlineTools(t)
	for _, tc := range []struct {
		impl, args, field string
	}{
		{"github_comment", `{"repo":"acme","number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"repo":"","number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"repo":"acme/","number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"repo":"/app","number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"repo":"acme/app/x","number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"repo":"acme//app","number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"repo":"ac me/app","number":1,"body":"x"}`, `"repo"`},
		{"github_comment", `{"repo":"acme/app","body":"x"}`, `"number"`},
		{"github_comment", `{"repo":"acme/app","number":0,"body":"x"}`, `"number"`},
		{"github_comment", `{"repo":"acme/app","number":1.5,"body":"x"}`, `"number"`},
		{"github_comment", `{"repo":"acme/app","number":true,"body":"x"}`, `"number"`},
		{"github_comment", `{"repo":"acme/app","number":1}`, `"body"`},
		{"github_comment", `{"repo":"acme/app","number":1,"body":"  "}`, `"body"`},
		{"github_comment", `null`, "JSON object"},
		{"github_comment", `[]`, "JSON object"},
		{"github_comment", ``, "JSON object"},
		{"github_comment", `{"repo":`, "not valid JSON"},
		{"github_create_branch", `{"repo":"acme/app","branch":"x"}`, `"from"`},
		{"github_create_branch", `{"repo":"acme/app","from":"main"}`, `"branch"`},
		{"github_create_branch", `{"repo":"acme/app","branch":"a..b","from":"main"}`, `"branch"`},
		{"github_create_branch", `{"repo":"acme/app","branch":"has space","from":"main"}`, `"branch"`},
		{"github_create_branch", `{"repo":"acme/app","branch":42,"from":"main"}`, `"branch"`},
		{"github_put_file", `{"repo":"acme/app","branch":"b","path":"a.md","message":"m"}`, `"content"`},
		{"github_put_file", `{"repo":"acme/app","branch":"b","path":"a.md","content":"c"}`, `"message"`},
		{"github_put_file", `{"repo":"acme/app","branch":"b","path":"/etc/passwd","content":"c","message":"m"}`, `"path"`},
		{"github_put_file", `{"repo":"acme/app","branch":"b","path":"a/../b","content":"c","message":"m"}`, `"path"`},
		{"github_put_file", `{"repo":"acme/app","branch":"b","path":"dir/","content":"c","message":"m"}`, `"path"`},
		{"github_put_file", `{"repo":"acme/app","path":"a.md","content":"c","message":"m"}`, `"branch"`},
		{"github_create_pull_request", `{"repo":"acme/app","head":"x","base":"main","body":""}`, `"title"`},
		{"github_create_pull_request", `{"repo":"acme/app","head":"x","base":"main","title":"t"}`, `"body"`},
		{"github_create_pull_request", `{"repo":"acme/app","base":"main","title":"t","body":""}`, `"head"`},
		{"github_create_pull_request", `{"repo":"acme/app","head":"main","base":"main","title":"t","body":""}`, `"head" and "base"`},
		{"github_create_pull_request", `{"repo":"acme/app","head":"acme:x","base":"main","title":"t","body":""}`, `"head"`},
		{"github_get_file", `{"repo":"acme/app"}`, `"path"`},
		{"github_get_file", `{"repo":"acme/app","path":"a","ref":"a b"}`, `"ref"`},
		{"github_list_pull_requests", `{"repo":"acme/app","state":"merged"}`, `"state"`},
		{"github_list_pull_requests", `{"repo":"acme/app","head":"x y"}`, `"head"`},
		{"github_list_pull_requests", `{}`, `"repo"`},
	} {
		_, err := identify(t, r, tc.impl, tc.args)
		if !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("%s %s: err = %v, want ErrInvalidArguments", tc.impl, tc.args, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.HasPrefix(msg, tc.impl+": ") || strings.Contains(msg, "\n") {
			t.Errorf("%s %s: message %q should name %s in one line", tc.impl, tc.args, msg, tc.field)
		}
	}
}

func TestIdentifyBusinessKeys(t *testing.T) {
	r := offlineTools(t)
	for _, tc := range []struct{ impl, args, key string }{
		{"github_create_branch", `{"repo":"acme/app","branch":"agent/fix","from":"main"}`, "branch:create:acme/app:agent/fix"},
		{"github_create_branch", `{"repo":"Acme/App","branch":"agent/fix","from":"0123456789abcdef0123456789abcdef01234567"}`, "branch:create:acme/app:agent/fix"},
		{"github_put_file", `{"repo":"acme/app","branch":"agent/fix","path":"docs/a.md","content":"","message":"m"}`, ""}, // no business key: every declared write is its own operation
		{"github_create_pull_request", `{"repo":"acme/payments","head":"agent/fix","base":"main","title":"t","body":""}`, "pr:create:acme/payments:agent/fix:main"},
		{"github_comment", `{"repo":"acme/app","number":3,"body":"x"}`, ""},
		{"github_get_file", `{"repo":"acme/app","path":"a"}`, ""},
		{"github_list_pull_requests", `{"repo":"acme/app"}`, ""},
	} {
		id, err := identify(t, r, tc.impl, tc.args)
		if err != nil {
			t.Errorf("%s %s: %v", tc.impl, tc.args, err)
			continue
		}
		if id.BusinessKey != tc.key {
			t.Errorf("%s %s: business key %q, want %q", tc.impl, tc.args, id.BusinessKey, tc.key)
		}
		if !json.Valid(id.Effect) {
			t.Errorf("%s: effect %s is not JSON", tc.impl, id.Effect)
		}
	}
}

func TestIdentifyEffects(t *testing.T) {
	r := offlineTools(t)
	effect := func(impl, args string) string {
		t.Helper()
		id, err := identify(t, r, impl, args)
		if err != nil {
			t.Fatalf("%s %s: %v", impl, args, err)
		}
		again, _ := identify(t, r, impl, args)
		if !bytes.Equal(id.Effect, again.Effect) || id.BusinessKey != again.BusinessKey {
			t.Fatalf("%s: Identify is not deterministic", impl)
		}
		return string(id.Effect)
	}
	pr := func(head, title, body string) string {
		args, _ := json.Marshal(map[string]string{"repo": "acme/app", "head": head, "base": "main", "title": title, "body": body})
		return effect("github_create_pull_request", string(args))
	}
	if got, want := pr("agent/fix", "A", "a"), `{"repo":"acme/app","head":"agent/fix","base":"main"}`; got != want {
		t.Errorf("PR effect %s, want %s", got, want)
	}
	if pr("agent/fix", "A", "a") != pr("agent/fix", "Another title", "other body") {
		t.Error("PR effect depends on title or body")
	}
	if pr("agent/fix", "A", "a") == pr("agent/other", "A", "a") {
		t.Error("PR effect does not depend on head")
	}
	if effect("github_create_pull_request", `{"repo":"acme/app","head":"x","base":"main","title":"t","body":""}`) !=
		effect("github_create_pull_request", `{"body":"","title":"t","base":"main","head":"x","repo":"Acme/App"}`) {
		t.Error("PR effect depends on field order or owner case")
	}

	put := func(content, message string) string {
		args, _ := json.Marshal(map[string]string{"repo": "acme/app", "branch": "b", "path": "p", "content": content, "message": message})
		return effect("github_put_file", string(args))
	}
	if put("x", "one") != put("x", "two") || put("x", "one") == put("y", "one") {
		t.Error("put_file effect should cover content, not the commit message")
	}

	comment := func(number, body string) string {
		return effect("github_comment", `{"repo":"acme/app","number":`+number+`,"body":"`+body+`"}`)
	}
	if got, want := comment("3", "hi"), `{"repo":"acme/app","number":3,"body":"hi"}`; got != want {
		t.Errorf("comment effect %s, want %s", got, want)
	}
	if comment("3", "hi") == comment("4", "hi") || comment("3", "hi") == comment("3", "ho") {
		t.Error("comment effect should cover number and body")
	}
	if effect("github_list_pull_requests", `{"repo":"acme/app"}`) != effect("github_list_pull_requests", `{"repo":"acme/app","state":"open"}`) {
		t.Error("list effect should canonicalise the default state")
	}
}
