package ghref_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/tools/ghref"
)

func TestParseRepo(t *testing.T) {
	r, err := ghref.ParseRepo("Acme-1/My.App_2")
	if err != nil || r != (ghref.Repo{Owner: "Acme-1", Name: "My.App_2"}) {
		t.Fatalf("ParseRepo = %+v, %v", r, err)
	}
	if r.String() != "Acme-1/My.App_2" || r.Key() != "acme-1/my.app_2" {
		t.Errorf("String %q, Key %q", r.String(), r.Key())
	}
	for _, tc := range []struct{ in, why string }{
		{"", `is required`},
		{"acme", `has no slash`},
		{"acme/app/x", `more than one slash`},
		{"/app", `an empty part`},
		{"acme/", `an empty part`},
		{"-acme/app", `in characters GitHub allows`},
		{"acme/a b", `in characters GitHub allows`},
		{"acme/..", `in characters GitHub allows`},
		{strings.Repeat("a", 40) + "/app", `in characters GitHub allows`},
		{"acme/" + strings.Repeat("a", 101), `in characters GitHub allows`},
	} {
		_, err := ghref.ParseRepo(tc.in)
		var bad *ghref.RepoError
		if !errors.As(err, &bad) || bad.Value != tc.in {
			t.Errorf("ParseRepo(%q) = %v, want a *RepoError", tc.in, err)
			continue
		}
		if got := bad.Describe(`field "repo"`); !strings.HasPrefix(got, `field "repo" `) || !strings.Contains(got, tc.why) {
			t.Errorf("ParseRepo(%q): %q, want it to say %q", tc.in, got, tc.why)
		}
	}
}

func TestParseIssue(t *testing.T) {
	is, err := ghref.ParseIssue("acme/app#12")
	if err != nil || is.Repo != (ghref.Repo{Owner: "acme", Name: "app"}) || is.Number != 12 || is.String() != "acme/app#12" {
		t.Fatalf("ParseIssue = %+v, %v", is, err)
	}
	for _, bad := range []string{"", "acme/app", "acme/app#", "acme/app#0", "acme/app#-1", "acme/app#x", "acme/app#1#2", "acme#1", "acme/app/x#1"} {
		if is, err := ghref.ParseIssue(bad); err == nil {
			t.Errorf("ParseIssue(%q) = %+v, want an error", bad, is)
		}
	}
}

func TestValidBranch(t *testing.T) {
	for _, ok := range []string{"main", "agent/fix-typo", "v1.2", "a@b"} {
		if !ghref.ValidBranch(ok) {
			t.Errorf("ValidBranch(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "a b", "a..b", "a//b", "/a", "a/", "-a", "a.", "a.lock", "@", "a@{1}", "a:b", "a~1", "a^", "a?", "a*", "a[", `a\b`, "a\x7f"} {
		if ghref.ValidBranch(bad) {
			t.Errorf("ValidBranch(%q) = true", bad)
		}
	}
	if !ghref.ValidRefName("") {
		t.Error(`ValidRefName("") = false; only ValidBranch requires a name`)
	}
}

// The bytes are part of recorded histories (their ledger reference is a
// Reconcile input), so they must never change.
func TestCommentArgumentsBytes(t *testing.T) {
	got := string(ghref.CommentArguments("acme/app", 7, "done <b> & \"quoted\""))
	want := `{"repo":"acme/app","number":7,"body":"done \u003cb\u003e \u0026 \"quoted\""}`
	if got != want {
		t.Errorf("CommentArguments = %s, want %s", got, want)
	}
}
