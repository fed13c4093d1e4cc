package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// A starter run on a namespace that lacks capstan's search attributes — no
// worker of this version has started there yet, which registers them — is
// refused with one sentence that names every missing attribute and the
// commands that define them, and starts nothing. Run as printed, the
// commands let the same start through.
func TestStartOnANamespaceWithoutCapstansAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := testenv.StartDevServer(ctx, nil) // a server of its own: the shared one's workers registered them
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	env := onServer(baseEnv(t, "search-attributes-missing"), srv.FrontendHostPort())
	run := func() result {
		return runStarter(t, env, "run", "--id", "attrs-1", "--repo", "acme/payments", "--prompt", "say hello")
	}

	r := run()
	if r.code != 1 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "does not define the search attribute(s)") {
		t.Fatalf("starter run on a namespace without capstan's attributes: exit %d, stderr %q; want exit 1 and one sentence saying which are missing", r.code, r.stderr)
	}
	for _, key := range workflows.SearchAttributes {
		if !strings.Contains(r.stderr, key.GetName()) {
			t.Errorf("the refusal does not name %s: %s", key.GetName(), r.stderr)
		}
	}
	var nf *serviceerror.NotFound
	if _, err := srv.Client().DescribeWorkflow(ctx, workflows.WorkflowID("attrs-1"), ""); !errors.As(err, &nf) {
		t.Fatalf("a refused start left a workflow behind (describe: %v)", err)
	}

	// The commands, as a person would paste them.
	_, cmds, ok := strings.Cut(strings.TrimSpace(r.stderr), "define them: ")
	if !ok {
		t.Fatalf("the refusal gives no commands: %s", r.stderr)
	}
	cli, err := testenv.TemporalCLI()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(cmds, " && ") {
		args := strings.Fields(line)
		if len(args) < 2 || args[0] != "temporal" {
			t.Fatalf("not a temporal command: %q", line)
		}
		out, err := exec.CommandContext(ctx, cli, append(args[1:], "--address", srv.FrontendHostPort())...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	// The server takes a moment to serve what it registered: wait until it
	// lists every attribute, then the same start goes through.
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := srv.Client().OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
		all := err == nil
		for _, key := range workflows.SearchAttributes {
			_, ok := list.GetCustomAttributes()[key.GetName()]
			all = all && ok
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the commands ran, but the namespace still lacks some of capstan's attributes after 30 s (%v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := run(); r.code != 0 || !strings.Contains(r.stdout, "started task attrs-1") {
		t.Fatalf("starter run after the commands: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}
