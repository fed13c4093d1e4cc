// Command sandbox serves capstan's offline stand-ins — a model provider
// (OpenAI Chat Completions and Anthropic Messages), the GitHub REST API and
// the Slack Web API — on loopback, until SIGINT or SIGTERM. It is its own
// program: an ordinary worker is pointed at it through the same base-URL
// settings that point it at the real services, so the demo exercises the
// HTTP path production uses, and the worker binary contains none of it.
//
//	sandbox [--env-file FILE] [--task-queue capstan-sandbox]
//	        [--model-addr ADDR] [--github-addr ADDR] [--slack-addr ADDR]
//	        [--github-app [--github-app-token-lifetime 1h]]
//
// Once all three servers listen it prints their URLs and the environment
// that points a worker at them (KEY=value lines, also written to --env-file
// when given, all at once, so a script can wait for the file and source
// it):
//
//	CAPSTAN_TASK_QUEUE  the sandbox's own queue, never the queue of real tasks
//	OPENAI_BASE_URL     the model server's /v1
//	ANTHROPIC_BASE_URL  the model server's root
//	GITHUB_API_URL      the GitHub server
//	SLACK_API_URL       the Slack server's /api/
//	OPENAI_API_KEY, ANTHROPIC_API_KEY, GITHUB_TOKEN, SLACK_BOT_TOKEN
//	                    a token that is not a secret: the fakes accept any
//
// With --github-app the GitHub server hosts a GitHub App (GitHub.SetApp)
// with a key made at start, and GITHUB_TOKEN gives way to
// CAPSTAN_GITHUB_APP_ID and CAPSTAN_GITHUB_APP_PRIVATE_KEY_FILE (a file of
// its own, removed at exit): the worker then acts as the App, with
// installation tokens of --github-app-token-lifetime, and writes as
// capstan-sandbox[bot].
//
// The model server plays the script the request's model names, so a task
// run with --model openai:demo (or anthropic:demo) plays the demo script;
// the scripts are listed in the internal/sandbox package documentation,
// with the fault rules each server takes at /_sandbox/faults and the
// counters it serves at /_sandbox/stats.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/sandbox"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the sandbox's flags.
type options struct {
	envFile   string
	taskQueue string
	listen    sandbox.Options
	// githubApp makes the GitHub server host a GitHub App, whose id and
	// private key the environment gives instead of GITHUB_TOKEN.
	githubApp        bool
	appTokenLifetime time.Duration
}

// run serves until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code := parseFlags(args, stderr)
	if code >= 0 {
		return code
	}
	sb, err := sandbox.Start(o.listen)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return 1
	}
	defer sb.Close()

	env := sb.WorkerEnv(o.taskQueue)
	if o.githubApp {
		var remove func()
		if env, remove, err = serveApp(sb, env, o.appTokenLifetime); err != nil {
			fmt.Fprintf(stderr, "sandbox: --github-app: %v\n", err)
			return 1
		}
		defer remove()
	}
	if o.envFile != "" {
		if err := writeEnvFile(o.envFile, env); err != nil {
			fmt.Fprintf(stderr, "sandbox: --env-file: %v\n", err)
			return 1
		}
		defer os.Remove(o.envFile) // a stale file would point a worker at closed ports
	}
	fmt.Fprintf(stdout, "sandbox: model %s  github %s  slack %s\n", sb.ModelURL, sb.GitHubURL, sb.SlackURL)
	fmt.Fprintln(stdout, "point an ordinary worker at it with this environment:")
	for _, kv := range env {
		fmt.Fprintln(stdout, "  "+kv)
	}
	fmt.Fprintln(stdout, "sandbox: serving until SIGINT or SIGTERM")

	<-ctx.Done()
	fmt.Fprintln(stdout, "sandbox: stopped")
	return 0
}

// parseFlags returns the options, or an exit code (2 for a usage error, 0
// for -h) when the program must not go on; -1 means go on.
func parseFlags(args []string, stderr io.Writer) (options, int) {
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.envFile, "env-file", "", "also write the worker's environment to this file, once every server listens (removed at exit)")
	fs.StringVar(&o.taskQueue, "task-queue", config.DefaultSandboxTaskQueue, "the task queue the printed environment gives the worker; never "+config.DefaultTaskQueue+", the queue of real tasks")
	fs.StringVar(&o.listen.ModelAddr, "model-addr", "127.0.0.1:0", "host:port of the model server (port 0: a free one)")
	fs.StringVar(&o.listen.GitHubAddr, "github-addr", "127.0.0.1:0", "host:port of the GitHub server")
	fs.StringVar(&o.listen.SlackAddr, "slack-addr", "127.0.0.1:0", "host:port of the Slack server")
	fs.BoolVar(&o.githubApp, "github-app", false, "the GitHub server hosts a GitHub App: the environment gives the worker its id and private key (a file, removed at exit) instead of GITHUB_TOKEN")
	fs.DurationVar(&o.appTokenLifetime, "github-app-token-lifetime", time.Hour, "how long the App's installation tokens live (with --github-app)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sandbox [--env-file FILE] [--task-queue QUEUE] [--model-addr ADDR] [--github-addr ADDR] [--slack-addr ADDR] [--github-app [--github-app-token-lifetime D]]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, 0
		}
		return o, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sandbox: unexpected argument %q\n", fs.Arg(0))
		return o, 2
	}
	if err := checkTaskQueue(o.taskQueue); err != nil {
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return o, 2
	}
	return o, -1
}

// ErrRealTaskQueue refuses to hand a worker pointed at the fakes the queue
// real tasks use: they would "complete" there, against fakes.
var ErrRealTaskQueue = errors.New("--task-queue must not be " + config.DefaultTaskQueue +
	", the queue of real tasks: a worker pointed at the sandbox would \"complete\" them against fakes; use " +
	config.DefaultSandboxTaskQueue + " (the default) or another queue")

func checkTaskQueue(q string) error {
	switch strings.TrimSpace(q) {
	case "":
		return errors.New("--task-queue is empty")
	case config.DefaultTaskQueue:
		return ErrRealTaskQueue
	}
	return nil
}

// writeEnvFile writes env to path through a temporary file in the same
// directory and a rename, so a reader sees no file or the whole of it.
func writeEnvFile(path string, env []string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sandbox-env-*")
	if err != nil {
		return err
	}
	_, werr := io.WriteString(tmp, strings.Join(env, "\n")+"\n")
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}
