package tool_test

import (
	"os/exec"
	"strings"
	"testing"
)

// toolMayLink are the modules package tool may link besides the standard
// library: a user's program that imports it links no SQLite, pgx, CEL,
// Temporal worker nor any of capstan's internal packages.
var toolMayLink = []string{
	"github.com/capstanhq/capstan", // the root package alone: its vocabulary
	"github.com/capstanhq/capstan/tool",
	"github.com/google/jsonschema-go/",       // the schema derived from a tool's arguments type
	"github.com/santhosh-tekuri/jsonschema/", // the schema's validator
	"golang.org/x/text/",                     // the validator's messages
}

// TestToolLinksLittle runs `go list -deps` over package tool and fails,
// naming the package, when it links anything else.
func TestToolLinksLittle(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		ok := false
		for _, allowed := range toolMayLink {
			if p == allowed || strings.HasSuffix(allowed, "/") && strings.HasPrefix(p, allowed) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("package tool links %s", p)
		}
	}
}
