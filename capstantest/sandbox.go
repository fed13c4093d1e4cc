package capstantest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
)

// Sandbox is capstan's fake services, running on free loopback ports for
// one test and closed with t.Cleanup: a model that plays scripts (OpenAI's
// streaming Chat Completions and Anthropic's streaming Messages), a GitHub
// fake (repositories, branches, files, pull requests, comments) and a
// Slack fake (channels, messages). A worker given [Sandbox.Env] talks to
// them as it would to the real services.
type Sandbox struct {
	t  testing.TB
	sb *sandbox.Sandbox
}

// StartSandbox starts the fakes, closed when the test ends.
func StartSandbox(t testing.TB) *Sandbox {
	t.Helper()
	sb, err := sandbox.Start(sandbox.Options{})
	if err != nil {
		t.Fatalf("capstantest: start the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return &Sandbox{t: t, sb: sb}
}

// Step is one answer of a scripted model: its text, the tool calls it
// asks for, or both. A step without calls ends the conversation. In Text
// and in the calls' arguments, {{task_id}} stands for the id of the task
// asking (as the task's system prompt gives it).
type Step struct {
	// Text is the answer's text.
	Text string
	// Calls are the tool calls the answer asks for.
	Calls []Call
}

// Call is a tool call a [Step] asks for: the tool's name and its
// arguments, a value that encodes as a JSON object (a struct or a
// map[string]any).
type Call struct {
	// Tool is the tool's name ("github_comment", or a tool of the user's).
	Tool string
	// Arguments are the call's arguments.
	Arguments any
}

// Script makes the model play steps, one per model request of a task,
// for the model name name: a task started with Model "openai:NAME" (or
// "anthropic:NAME") plays it. A request past the last step gets a text
// answer saying the script has no more steps. Script fails the test on a
// step with neither text nor calls, arguments that are not a JSON object,
// or the name of one of the sandbox's own scripts.
func (s *Sandbox) Script(name string, steps ...Step) {
	s.t.Helper()
	type callJSON struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type stepJSON struct {
		Text      string     `json:"text,omitempty"`
		ToolCalls []callJSON `json:"tool_calls,omitempty"`
	}
	out := struct {
		Name  string     `json:"name"`
		Steps []stepJSON `json:"steps"`
	}{Name: name, Steps: []stepJSON{}}
	for i, st := range steps {
		sj := stepJSON{Text: st.Text}
		for _, c := range st.Calls {
			args, err := json.Marshal(c.Arguments)
			if err != nil {
				s.t.Fatalf("capstantest: script %q, step %d, call %s: %v", name, i+1, c.Tool, err)
			}
			sj.ToolCalls = append(sj.ToolCalls, callJSON{Name: c.Tool, Arguments: args})
		}
		out.Steps = append(out.Steps, sj)
	}
	data, err := json.Marshal(out)
	if err != nil {
		s.t.Fatalf("capstantest: script %q: %v", name, err)
	}
	if err := s.sb.Model.AddScript(data); err != nil {
		s.t.Fatalf("capstantest: %v", err)
	}
}

// Env is the environment that points a capstan worker at the fakes: the
// base URLs of OpenAI, Anthropic, GitHub and Slack and a credential for
// each (the fakes take any). It holds no task queue and no ledger: the
// worker's own options give those.
func (s *Sandbox) Env() map[string]string {
	env := map[string]string{}
	for _, kv := range s.sb.WorkerEnv("") {
		k, v, _ := strings.Cut(kv, "=")
		if k != "CAPSTAN_TASK_QUEUE" {
			env[k] = v
		}
	}
	return env
}

// ModelURL is the model's base URL for OpenAI's wire ("http://host:port/v1").
func (s *Sandbox) ModelURL() string { return s.sb.ModelURL }

// AnthropicURL is the model's base URL for Anthropic's wire ("http://host:port/").
func (s *Sandbox) AnthropicURL() string { return s.sb.AnthropicURL }

// GitHubURL is the GitHub fake's API base URL ("http://host:port/").
func (s *Sandbox) GitHubURL() string { return s.sb.GitHubURL }

// SlackURL is the Slack fake's API base URL ("http://host:port/api/").
func (s *Sandbox) SlackURL() string { return s.sb.SlackURL }

// Service names one of the fakes.
type Service string

// The fakes a [Fault] can strike.
const (
	GitHub Service = "github"
	Slack  Service = "slack"
	Model  Service = "model"
)

// FaultKind says what a [Fault] does to the requests it strikes.
type FaultKind string

// The kinds of fault. GitHub and Slack take FaultDrop, FaultFail,
// FaultDelay, FaultLag and FaultRateLimit; the model takes FaultStatus,
// FaultResetConnection and the model's other kinds (see the sandbox's
// documentation in docs/), each by its name.
const (
	// FaultDrop lets the fake act, then closes the connection without an
	// answer: the effect happened and the client cannot know.
	FaultDrop FaultKind = "drop"
	// FaultFail answers Status (5xx, default 500) before the fake acts.
	FaultFail FaultKind = "fail"
	// FaultDelay lets the fake act, then holds the answer for Delay.
	FaultDelay FaultKind = "delay"
	// FaultLag makes a read (a listing) leave out what was written less
	// than Lag ago.
	FaultLag FaultKind = "lag"
	// FaultRateLimit refuses with the service's rate-limit answer, telling
	// the client to come back after RetryAfter, before the fake acts.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultStatus (the model) answers Status (400 to 599) in the wire
	// format's error form.
	FaultStatus FaultKind = "status"
	// FaultResetConnection (the model) resets the connection without an
	// answer.
	FaultResetConnection FaultKind = "reset_connection"
)

// Fault strikes requests to one endpoint of one fake.
type Fault struct {
	// Service is the fake it strikes.
	Service Service
	// Endpoint names the endpoint: for GitHub the operation id of GitHub's
	// REST description ("pulls/create", "issues/create-comment",
	// "repos/create-or-update-file-contents", "git/create-ref"); for Slack
	// the method ("chat.postMessage"); for the model "chat/completions"
	// (OpenAI) or "messages" (Anthropic).
	Endpoint string
	// Kind is what it does.
	Kind FaultKind
	// Times is how many matching requests it strikes; 0 means all of them
	// until ClearFaults.
	Times int
	// Status is FaultFail's and FaultStatus's status.
	Status int
	// Delay is FaultDelay's, Lag FaultLag's, RetryAfter FaultRateLimit's.
	Delay, Lag, RetryAfter time.Duration
}

// InjectFault adds f; faults apply in the order added, the oldest unspent
// one first. A fault the fake does not take fails the test, saying why.
func (s *Sandbox) InjectFault(f Fault) {
	s.t.Helper()
	rule := sandbox.FaultRule{Endpoint: f.Endpoint, Kind: sandbox.FaultKind(f.Kind), Times: f.Times, Status: f.Status,
		Delay: f.Delay, Lag: f.Lag, RetryAfter: f.RetryAfter}
	var err error
	switch f.Service {
	case GitHub:
		err = s.sb.GitHub.AddFault(rule)
	case Slack:
		err = s.sb.Slack.AddFault(rule)
	case Model:
		err = s.sb.Model.AddFault(rule)
	default:
		err = fmt.Errorf("unknown service %q (github, slack or model)", f.Service)
	}
	if err != nil {
		s.t.Fatalf("capstantest: fault: %v", err)
	}
}

// ClearFaults removes every fault of every fake.
func (s *Sandbox) ClearFaults() {
	s.sb.GitHub.ClearFaults()
	s.sb.Slack.ClearFaults()
	s.sb.Model.ClearFaults()
}

// Counts are what the fakes have done so far: effects, each counted once
// even when a fault lost its answer, and requests.
type Counts struct {
	// PullRequests, Comments, BranchesCreated and FilesWritten are the
	// GitHub fake's effects.
	PullRequests, Comments, BranchesCreated, FilesWritten int
	// Messages is the number of messages posted to Slack.
	Messages int
	// ModelRequests is the number of completion requests the model got,
	// in either wire format; GitHubRequests and SlackRequests the API
	// requests of those fakes (a request a fault refused is not counted).
	ModelRequests, GitHubRequests, SlackRequests int
}

// Counts returns the fakes' counters.
func (s *Sandbox) Counts() Counts {
	g, sl, m := s.sb.GitHub.Stats(), s.sb.Slack.Stats(), s.sb.Model.Stats()
	return Counts{PullRequests: int(g.PullRequestsCreated), Comments: int(g.CommentsCreated), BranchesCreated: int(g.BranchesCreated),
		FilesWritten: int(g.FilesWritten), Messages: int(sl.MessagesPosted), ModelRequests: int(m.Requests),
		GitHubRequests: int(g.Requests), SlackRequests: int(sl.Requests)}
}

// CreateIssue opens an issue in the GitHub fake's repository repo
// (OWNER/NAME; the fake creates a repository on first use, with a README
// on main) and returns its number, so a task has something to comment
// on. It goes through the fake's API, so it counts as a GitHub request and
// a fault on "issues/create" strikes it.
func (s *Sandbox) CreateIssue(repo, title string) int {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"title": title})
	req, err := http.NewRequest(http.MethodPost, s.sb.GitHubURL+"repos/"+repo+"/issues", bytes.NewReader(body))
	if err != nil {
		s.t.Fatalf("capstantest: create an issue in %s: %v", repo, err)
	}
	req.Header.Set("Authorization", "Bearer "+sandbox.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("capstantest: create an issue in %s: %v", repo, err)
	}
	defer resp.Body.Close()
	var out struct {
		Number int `json:"number"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		s.t.Fatalf("capstantest: create an issue in %s: status %s (%v)", repo, resp.Status, err)
	}
	return out.Number
}

// Comment is a comment the GitHub fake holds.
type Comment struct {
	// ID is the comment's id, the end of its external id.
	ID int64
	// Author is the login of who wrote it.
	Author string
	// Body is its text, capstan's operation marker included.
	Body string
}

// Comments returns the comments on issue or pull request number of repo,
// oldest first.
func (s *Sandbox) Comments(repo string, number int) []Comment {
	var out []Comment
	for _, c := range s.sb.GitHub.Comments(repo, number) {
		out = append(out, Comment{ID: c.ID, Author: c.Author, Body: c.Body})
	}
	return out
}

// PullRequest is a pull request the GitHub fake holds.
type PullRequest struct {
	// Number is the pull request's number.
	Number int
	// Head and Base are its branches.
	Head, Base string
	// Title and Body are its text.
	Title, Body string
	// State is "open" or "closed".
	State string
}

// PullRequests returns the pull requests of repo, by number.
func (s *Sandbox) PullRequests(repo string) []PullRequest {
	var out []PullRequest
	for _, p := range s.sb.GitHub.PullRequests(repo) {
		out = append(out, PullRequest{Number: p.Number, Head: p.Head, Base: p.Base, Title: p.Title, Body: p.Body, State: p.State})
	}
	return out
}

// Messages returns the texts of the messages posted to the Slack
// channel (a name such as "#general", or an id), oldest first.
func (s *Sandbox) Messages(channel string) []string {
	var out []string
	for _, m := range s.sb.Slack.Messages(channel) {
		out = append(out, m.Text)
	}
	return out
}
