package taskstart

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/workflows"
)

func TestSummaryIsTheRepoAndTheFirstLineOfThePrompt(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", SummaryRunes+5)
	cases := []struct {
		repo, prompt, want string
	}{
		{"acme/payments", "Fix the flaky retry test\n\nIt fails one run in ten on CI.", "acme/payments · Fix the flaky retry test"},
		{"acme/payments", "\n  \r\n  Bump the Go toolchain  \r\nthen run the tests", "acme/payments · Bump the Go toolchain"},
		{"", "Summarise yesterday's incidents\nfor #ops", "Summarise yesterday's incidents"},
		{"acme/web", "short", "acme/web · short"},
		{"acme/web", long + "\nsecond line", "acme/web · " + strings.Repeat("é", SummaryRunes) + "…"},
		{"acme/web", " \n", "acme/web"},
	}
	for _, tc := range cases {
		got := Summary(workflows.AgentTaskInput{Repo: tc.repo, Prompt: tc.prompt})
		if got != tc.want {
			t.Errorf("Summary(%q, %q) = %q, want %q", tc.repo, tc.prompt, got, tc.want)
		}
	}
}
