package workflows

import (
	"strings"
	"testing"
)

func TestMatchOperation(t *testing.T) {
	ids := []string{
		"default:t1:github_create_pull_request:acme/app:feat:main",
		"default:t1:t2:github_comment:0",
		"default:t1:t3:github_comment:0",
		"default:t1:deliver:slack:C1",
	}
	for _, tc := range []struct{ given, want, err string }{
		{ids[0], ids[0], ""},
		{"github_create_pull_request:acme/app:feat:main", ids[0], ""},
		{"t1:deliver:slack:C1", ids[3], ""},
		{"t2:github_comment:0", ids[1], ""},
		{"github_comment:0", "", `2 operations ending in "github_comment:0"`},
		{"main", ids[0], ""},
		{"ain", "", `no operation "ain"`}, // not at a ":" boundary
		{"default:t1:nope", "", `no operation "default:t1:nope"`},
		{"", "", "no operation"},
	} {
		got, err := MatchOperation(ids, tc.given)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("MatchOperation(%q) = %q, %v; want %q", tc.given, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("MatchOperation(%q) = %q, %v; want an error saying %q", tc.given, got, err, tc.err)
		}
	}
}
