package capstan_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// clientSDKs are the module paths of the clients the activities call. The
// workflow must not link them: its code is replayed on any worker, and what
// it needs of the activities is their contract (internal/contract), not
// their clients. Nor must the starter, which people install on laptops.
var clientSDKs = []string{
	"github.com/slack-go/slack",
	"github.com/google/go-github",
	"github.com/sony/gobreaker",
	"github.com/openai/openai-go",
	"github.com/anthropics/anthropic-sdk-go",
	"github.com/modelcontextprotocol/go-sdk",
}

// starterServes are the SDKs the starter links to serve a protocol itself,
// not to call a dependency: `starter mcp serve` speaks MCP through the
// official SDK (docs/design.md §5.10). It still links none of capstan's
// MCP client (internal/mcp), which is the worker's.
var starterServes = map[string]bool{"github.com/modelcontextprotocol/go-sdk": true}

// TestWorkflowAndStarterLinkNoClientSDK runs `go list -deps` over the
// workflow and the starter and fails, naming the import chain, when one of
// them links a client SDK, so the separation cannot drift back.
func TestWorkflowAndStarterLinkNoClientSDK(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	for _, pkg := range []string{"./internal/workflows", "./starter"} {
		t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
			imports := listDeps(t, goBin, pkg)
			root := "github.com/capstanhq/capstan/" + strings.TrimPrefix(pkg, "./")
			if _, ok := imports[root]; !ok {
				t.Fatalf("go list -deps %s did not list %s itself", pkg, root)
			}
			for p := range imports {
				if pkg == "./starter" && p == "github.com/capstanhq/capstan/internal/mcp" {
					t.Errorf("%s links the worker's MCP client: %s", pkg, strings.Join(chain(imports, root, p), " → "))
				}
				for _, sdk := range clientSDKs {
					if pkg == "./starter" && starterServes[sdk] {
						continue
					}
					if p == sdk || strings.HasPrefix(p, sdk+"/") {
						t.Errorf("%s links %s: %s", pkg, p, strings.Join(chain(imports, root, p), " → "))
					}
				}
			}
		})
	}
}

// TestWorkerLinksNoSandbox: the production worker binary (cmd/worker), and
// the public worker package a program embeds it through, do not contain the
// offline fakes; the demo and the tests point an ordinary worker at the
// sandbox program over HTTP instead (docs/design.md, the sandbox).
func TestWorkerLinksNoSandbox(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	const sandbox = "github.com/capstanhq/capstan/internal/sandbox"
	for _, pkg := range []string{"./cmd/worker", "./worker"} {
		root := "github.com/capstanhq/capstan/" + strings.TrimPrefix(pkg, "./")
		imports := listDeps(t, goBin, pkg)
		if _, ok := imports[root]; !ok {
			t.Fatalf("go list -deps %s did not list %s itself", pkg, root)
		}
		if _, ok := imports["github.com/capstanhq/capstan/internal/workerapp"]; !ok {
			t.Fatalf("go list -deps %s does not list the worker's wiring (internal/workerapp): %d packages", pkg, len(imports))
		}
		for p := range imports {
			if p == sandbox || strings.HasPrefix(p, sandbox+"/") {
				t.Errorf("%s links %s: %s", pkg, p, strings.Join(chain(imports, root, p), " → "))
			}
		}
	}
}

// listDeps returns every package pkg depends on (itself included) with the
// packages each imports directly.
func listDeps(t *testing.T, goBin, pkg string) map[string][]string {
	t.Helper()
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Imports", pkg)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("read go list's output: %v", err)
		}
		imports[p.ImportPath] = p.Imports
	}
	return imports
}

// chain is a shortest import path from root to target.
func chain(imports map[string][]string, root, target string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append(path, p)
			}
			slices.Reverse(path)
			return path
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{root, "…", target}
}
