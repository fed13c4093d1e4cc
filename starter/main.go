// Command starter is how people and scripts start and watch capstan tasks:
//
//	starter run --prompt TEXT [--repo OWNER/NAME] [--base BRANCH] [--slack CHANNEL] [--comment OWNER/NAME#N]...
//	            [--model PROVIDER:MODEL] [--id TASK_ID] [--tenant NAME] [--priority 1..5] [--max-turns N]
//	            [--idle-timeout D] [--max-duration D] [--human-timeout D] [--wait | --follow] [--json]
//	starter status TASK_ID [--json]
//	starter follow TASK_ID
//	starter policy (check FILE | explain --tool NAME [--repo R --branch B --path P ...])
//	starter list [--needs-human | --awaiting-approval] [--json]
//	starter resolve TASK_ID OPERATION_ID (--found URL | --absent | --abort)
//	starter approve TASK_ID OPERATION_ID [--note TEXT] [--as NAME]
//	starter deny TASK_ID OPERATION_ID --reason TEXT [--as NAME]
//	starter cancel TASK_ID
//	starter demo
//	starter gc --older-than DURATION [--dry-run]
//	starter versions [--json]
//	starter codec-server [--addr HOST:PORT] [--cors-origin URL] [--codec-auth TOKEN]
//	starter mcp serve [--allow-approve]
//	starter schedule create --id SCHEDULE_ID (--cron EXPR | --every D) [--overlap POLICY] --prompt TEXT [task flags of run]
//	starter schedule (list | describe SCHEDULE_ID | pause SCHEDULE_ID [--unpause] | delete SCHEDULE_ID)
//
// run --id of a running task with the same arguments attaches to it; with
// other arguments it is refused, naming what differs.
//
// Exit status: 0 completed (or started, without --wait), 1 failed or
// cancelled or an environment problem, 2 bad usage. Bad input is refused
// with one line on stderr before anything is started.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/redact"
	captrace "github.com/capstanhq/capstan/internal/trace"
	"github.com/capstanhq/capstan/internal/workflows"
)

// usageError is bad input: exit status 2, nothing started.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// taskEndedError reports a task that ended failed or cancelled: exit 1, and
// the result has already been printed.
type taskEndedError struct{ status workflows.Status }

func (e *taskEndedError) Error() string { return "task " + string(e.status) }

// app carries what every command needs.
type app struct {
	cfg    config.Config
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// tracing is the starter's traces (OTEL_EXPORTER_OTLP_ENDPOINT), set
	// up by the first dial; nil before.
	tracing *captrace.Provider
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{cfg: config.FromEnv(getenv), stdout: stdout, stderr: stderr, getenv: getenv}
	defer a.flushTraces()
	root := &cobra.Command{
		Use:           "starter",
		Short:         "Start and watch capstan agent tasks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(a.policyCommand())
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	root.AddCommand(a.runCommand(), a.statusCommand(), a.listCommand(), a.cancelCommand(), a.resolveCommand(), a.approveCommand(), a.denyCommand(), a.showCommand(), a.demoCommand(), a.followCommand(), a.gcCommand(), a.scheduleCommand(), a.mcpCommand(), a.codecServerCommand(), a.versionsCommand())

	err := root.ExecuteContext(ctx)
	var ue *usageError
	var te *taskEndedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &te):
		return 1
	case errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command"):
		// cobra reports an unknown subcommand only as text.
		fmt.Fprintf(stderr, "starter: %s\n", a.errorText(err))
		return 2
	default:
		fmt.Fprintf(stderr, "starter: %s\n", a.errorText(err))
		return 1
	}
}

// errorText is the sentence the starter prints for err: cleaned for the
// terminal, and quoting no secret of its environment (a codec key given
// the wrong way round, a key in a configured URL's query).
func (a *app) errorText(err error) string {
	return clean(redact.New(a.cfg.Secrets()...).String(err.Error()))
}

// usageArgs makes a cobra argument check's complaint a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &usageError{msg: err.Error()}
		}
		return nil
	}
}
