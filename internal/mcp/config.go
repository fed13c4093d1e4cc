// Package mcp plugs Model Context Protocol servers into capstan as tools
// with the guarantees of the built-in ones (docs/design.md §5.10): their
// configuration (the mcpServers convention, with capstan's own settings
// beside it), a client per server over the official Go SDK (stdio: the
// worker starts the process and restarts it with backoff when it dies;
// streamable HTTP), and one tools.Tool per server tool, named
// mcp__<server>__<tool>, whose class decides what is done when an answer is
// lost.
//
// Secrets: the values ${VAR} expands to (from the worker's environment)
// live only in unexported fields of Server, which nothing encodes, logs or
// prints; errors name the variable, never its value. A stdio server's
// process does not inherit the worker's environment: it gets only
// BaseEnv, the names its capstan.inherit_env lists, and its own "env".
package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
)

// Config is a parsed, validated configuration file: its servers by name.
type Config struct {
	// File is the path it was read from.
	File    string
	Servers map[string]*Server
}

// Names returns the servers' names, sorted.
func (c *Config) Names() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.Servers))
	for n := range c.Servers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Server is one server of the file, as written (${VAR} unexpanded) and as
// the worker will reach it (expanded, unexported).
type Server struct {
	Name string
	// Command, Args, Env and Cwd start a stdio server; URL and Headers
	// reach a streamable HTTP one. As written in the file.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string
	URL     string
	Headers map[string]string
	Capstan Settings

	// expanded holds the values with ${VAR} replaced: secrets, which only
	// the connection reads. A pointer, so that printing a Server (%+v)
	// shows an address, never a value.
	expanded *expanded
}

// expanded is a server's reachable form.
type expanded struct {
	command string
	args    []string
	env     []string // KEY=VALUE: a stdio server's whole environment
	cwd     string
	url     string
	headers map[string]string
}

// Stdio reports whether the server is started as a process.
func (s *Server) Stdio() bool { return s.Command != "" }

// Settings are capstan's own settings of a server (the "capstan" key).
type Settings struct {
	// Trusted: believe the server's annotations (readOnlyHint,
	// idempotentHint) for the tools whose class is not configured.
	Trusted bool
	// ConnectTimeout bounds starting or reaching the server and its
	// initialisation; CallTimeout bounds one tool call, whatever progress
	// it reports.
	ConnectTimeout time.Duration
	CallTimeout    time.Duration
	// IdleTimeout ends a call after this long without an answer or a
	// progress notification (each one starts it again), for the tools
	// that set none of their own.
	IdleTimeout time.Duration
	// Breaker, when set, are the thresholds of the server's breaker
	// mcp/<server>; nil takes the worker's (CAPSTAN_BREAKER_*).
	Breaker *config.BreakerSettings
	// Tools are the per-tool settings, by the server's name of the tool.
	Tools map[string]ToolSettings
	// InheritEnv names the variables of the worker's environment a stdio
	// server is given beside BaseEnv (capstan.inherit_env); a name the
	// worker's environment does not hold is left out.
	InheritEnv []string
}

// BaseEnv are the variables of the worker's environment every stdio server
// is given, when set: what a program needs to find its tools, its home and
// temporary directory, its language, and the network through a proxy with
// the site's certificates. Everything else the worker holds (GITHUB_TOKEN,
// the model keys, CAPSTAN_CODEC_KEYS, the App key, the ledger's DSN, …)
// reaches a server only when its "env" says so (${VAR}) or its
// capstan.inherit_env names it.
var BaseEnv = []string{"PATH", "HOME", "LANG", "TMPDIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR"}

// ToolSettings are capstan's settings of one tool.
type ToolSettings struct {
	// Class is the tool's safety class; "" leaves it to the annotations of
	// a trusted server, else unsafe.
	Class capstan.Class
	// Lookup names another tool of the same server that tells whether an
	// operation took effect, called with {"operation_id": "…"}.
	Lookup string
	// IdleTimeout, when set, is the tool's own idle timeout
	// (Settings.IdleTimeout).
	IdleTimeout time.Duration
}

// IdleTimeoutOf is the idle timeout of the server's tool name: its own, else
// the server's.
func (s Settings) IdleTimeoutOf(name string) time.Duration {
	if d := s.Tools[name].IdleTimeout; d > 0 {
		return d
	}
	return s.IdleTimeout
}

// fileJSON and its parts are the file's shape.
type fileJSON struct {
	Servers map[string]json.RawMessage `json:"mcpServers"`
}

type serverJSON struct {
	Type     string            `json:"type"`
	Command  string            `json:"command"`
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	Cwd      string            `json:"cwd"`
	URL      string            `json:"url"`
	Headers  map[string]string `json:"headers"`
	Disabled bool              `json:"disabled"`
	Capstan  *settingsJSON     `json:"capstan"`
}

type settingsJSON struct {
	Trusted        bool                `json:"trusted"`
	ConnectTimeout string              `json:"connect_timeout"`
	CallTimeout    string              `json:"call_timeout"`
	IdleTimeout    string              `json:"idle_timeout"`
	Breaker        *breakerJSON        `json:"breaker"`
	Tools          map[string]toolJSON `json:"tools"`
	InheritEnv     []string            `json:"inherit_env"`
}

type breakerJSON struct {
	Failures     int     `json:"failures"`
	FailureRatio float64 `json:"failure_ratio"`
	MinCalls     int     `json:"min_calls"`
	Window       string  `json:"window"`
	Open         string  `json:"open"`
}

type toolJSON struct {
	Class       string `json:"class"`
	Lookup      string `json:"lookup"`
	IdleTimeout string `json:"idle_timeout"`
}

// ErrConfig is wrapped by every error of Load and Parse.
var ErrConfig = errors.New("mcp configuration")

// Load reads and validates the file at path, expanding ${VAR} through
// lookup (os.LookupEnv in a worker).
func Load(path string, lookup func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return Parse(path, data, lookup)
}

// Parse validates data, the text of the file named file. Its error is one
// sentence naming the server and the field at fault.
func Parse(file string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	var f fileJSON
	if err := strictDecode(data, &f); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrConfig, file, err)
	}
	if f.Servers == nil {
		return nil, fmt.Errorf(`%w %s: there is no "mcpServers" object`, ErrConfig, file)
	}
	c := &Config{File: file, Servers: map[string]*Server{}}
	names := make([]string, 0, len(f.Servers))
	for n := range f.Servers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		s, skip, err := parseServer(name, f.Servers[name], lookup)
		if err != nil {
			return nil, fmt.Errorf("%w %s: server %q: %v", ErrConfig, file, name, err)
		}
		if !skip {
			c.Servers[name] = s
		}
	}
	return c, nil
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// validServer is what a server's name may be made of.
var validServer = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func parseServer(name string, raw json.RawMessage, lookup func(string) (string, bool)) (*Server, bool, error) {
	switch {
	case strings.Contains(name, "__"):
		return nil, false, errors.New(`the name contains "__", which separates the server from the tool in mcp__<server>__<tool>; rename it`)
	case !validServer.MatchString(name):
		return nil, false, errors.New("the name may hold only letters, digits, _ and -")
	}
	var sj serverJSON
	if err := strictDecode(raw, &sj); err != nil {
		return nil, false, err
	}
	if sj.Disabled {
		return nil, true, nil
	}
	s := &Server{Name: name, Command: sj.Command, Args: sj.Args, Env: sj.Env, Cwd: sj.Cwd, URL: sj.URL, Headers: sj.Headers}
	if err := s.checkTransport(sj.Type); err != nil {
		return nil, false, err
	}
	settings, err := parseSettings(sj.Capstan)
	if err != nil {
		return nil, false, err
	}
	s.Capstan = settings
	if !s.Stdio() && len(settings.InheritEnv) > 0 {
		return nil, false, errors.New(`"capstan.inherit_env" is set for a "url" server; it belongs to a stdio server`)
	}
	if err := s.expand(lookup); err != nil {
		return nil, false, err
	}
	return s, false, nil
}

func (s *Server) checkTransport(typ string) error {
	switch {
	case s.Command != "" && s.URL != "":
		return errors.New(`"command" and "url" are both set: a server is either started (stdio) or reached (streamable HTTP)`)
	case s.Command == "" && s.URL == "":
		return errors.New(`neither "command" (stdio) nor "url" (streamable HTTP) is set`)
	case s.Command != "" && (len(s.Headers) > 0):
		return errors.New(`"headers" is set for a stdio server; headers belong to a "url" server`)
	case s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0 || s.Cwd != ""):
		return errors.New(`"args", "env" or "cwd" is set for a "url" server; they belong to a stdio server`)
	}
	switch typ {
	case "", "stdio", "http", "streamable-http", "streamableHttp":
	case "sse":
		return errors.New(`type: "sse" (the deprecated HTTP+SSE transport) is not supported; use the server's streamable HTTP endpoint`)
	default:
		return fmt.Errorf(`type: %q is not stdio or http`, typ)
	}
	if typ == "stdio" && s.Command == "" || (typ == "http" || typ == "streamable-http" || typ == "streamableHttp") && s.URL == "" {
		return fmt.Errorf(`type: %q does not match the server's "command"/"url"`, typ)
	}
	return nil
}

// classes are the classes a tool of an MCP server may have.
var classes = []capstan.Class{capstan.ClassReadOnly, capstan.ClassIdempotent, capstan.ClassUnsafe}

func parseSettings(sj *settingsJSON) (Settings, error) {
	st := Settings{ConnectTimeout: config.DefaultMCPConnectTimeout, CallTimeout: config.DefaultMCPCallTimeout,
		IdleTimeout: config.DefaultMCPIdleTimeout, Tools: map[string]ToolSettings{}}
	if sj == nil {
		return st, nil
	}
	st.Trusted = sj.Trusted
	for i, name := range sj.InheritEnv {
		if !validVariable.MatchString(name) {
			return st, fmt.Errorf("capstan.inherit_env[%d]: %q is not a variable name", i, name)
		}
	}
	st.InheritEnv = sj.InheritEnv
	var err error
	if st.ConnectTimeout, err = duration("capstan.connect_timeout", sj.ConnectTimeout, config.DefaultMCPConnectTimeout); err != nil {
		return st, err
	}
	if st.CallTimeout, err = duration("capstan.call_timeout", sj.CallTimeout, config.DefaultMCPCallTimeout); err != nil {
		return st, err
	}
	if st.IdleTimeout, err = duration("capstan.idle_timeout", sj.IdleTimeout, config.DefaultMCPIdleTimeout); err != nil {
		return st, err
	}
	if sj.Breaker != nil {
		b, err := parseBreaker(*sj.Breaker)
		if err != nil {
			return st, err
		}
		st.Breaker = &b
	}
	for _, impl := range sortedKeys((sj.Tools)) {
		tj := sj.Tools[impl]
		ts := ToolSettings{Class: capstan.Class(tj.Class), Lookup: tj.Lookup}
		field := fmt.Sprintf("capstan.tools.%s", impl)
		if ts.IdleTimeout, err = duration(field+".idle_timeout", tj.IdleTimeout, 0); err != nil {
			return st, err
		}
		switch {
		case tj.Class == string(capstan.ClassConditional):
			return st, fmt.Errorf("%s.class: conditional needs a business key capstan cannot know for an MCP tool; use unsafe with a lookup", field)
		case tj.Class != "" && !slices.Contains(classes, ts.Class):
			return st, fmt.Errorf("%s.class: %q is not read_only, idempotent or unsafe", field, tj.Class)
		case tj.Lookup == impl:
			return st, fmt.Errorf("%s.lookup: a tool cannot be its own lookup", field)
		case tj.Lookup != "" && ts.Class != capstan.ClassUnsafe:
			return st, fmt.Errorf("%s.lookup: only an unsafe tool is looked up (its class is %q); set class to unsafe", field, classOrNone(tj.Class))
		}
		st.Tools[impl] = ts
	}
	return st, nil
}

func classOrNone(c string) string {
	if c == "" {
		return "not set"
	}
	return c
}

func parseBreaker(bj breakerJSON) (config.BreakerSettings, error) {
	b := config.DefaultBreakerSettings
	if bj.Failures != 0 {
		b.ConsecutiveFailures = bj.Failures
	}
	if bj.FailureRatio != 0 {
		b.FailureRatio = bj.FailureRatio
	}
	if bj.MinCalls != 0 {
		b.MinCalls = bj.MinCalls
	}
	var err error
	if b.Window, err = duration("capstan.breaker.window", bj.Window, b.Window); err != nil {
		return b, err
	}
	if b.OpenFor, err = duration("capstan.breaker.open", bj.Open, b.OpenFor); err != nil {
		return b, err
	}
	if err := b.Validate(); err != nil {
		return b, fmt.Errorf("capstan.%v", err)
	}
	return b, nil
}

func duration(field, v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive Go duration such as 30s or 2m", field, v)
	}
	return d, nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// variable is one ${NAME} reference.
var variable = regexp.MustCompile(`\$\{([^}]*)\}`)

// validVariable is what a variable's name may be.
var validVariable = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandString replaces every ${NAME} in v through lookup; field names v in
// errors, which name the variable and never a value.
func expandString(field, v string, lookup func(string) (string, bool)) (string, error) {
	var bad error
	out := variable.ReplaceAllStringFunc(v, func(ref string) string {
		name := ref[2 : len(ref)-1]
		if !validVariable.MatchString(name) {
			bad = fmt.Errorf("%s: ${%s} is not a variable name", field, name)
			return ""
		}
		val, ok := lookup(name)
		if !ok {
			bad = fmt.Errorf("%s: ${%s} is not set in the worker's environment", field, name)
			return ""
		}
		return val
	})
	return out, bad
}

func (s *Server) expand(lookup func(string) (string, bool)) error {
	var err error
	e := &expanded{}
	s.expanded = e
	if e.command, err = expandString("command", s.Command, lookup); err != nil {
		return err
	}
	for i, a := range s.Args {
		v, err := expandString(fmt.Sprintf("args[%d]", i), a, lookup)
		if err != nil {
			return err
		}
		e.args = append(e.args, v)
	}
	if s.Stdio() {
		if e.env, err = s.environment(lookup); err != nil {
			return err
		}
	}
	if e.cwd, err = expandString("cwd", s.Cwd, lookup); err != nil {
		return err
	}
	if s.URL != "" {
		if e.url, err = expandString("url", s.URL, lookup); err != nil {
			return err
		}
		u, perr := url.Parse(e.url)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("url: is not an http or https URL")
		}
	}
	e.headers = map[string]string{}
	for _, k := range sortedKeys((s.Headers)) {
		v, err := expandString("headers."+k, s.Headers[k], lookup)
		if err != nil {
			return err
		}
		e.headers[k] = v
	}
	return nil
}

// environment is a stdio server's whole environment, KEY=VALUE: BaseEnv
// and capstan.inherit_env as the worker's environment holds them, then the
// server's own "env" (expanded), which wins over both.
func (s *Server) environment(lookup func(string) (string, bool)) ([]string, error) {
	vars := map[string]string{}
	for _, k := range append(slices.Clone(BaseEnv), s.Capstan.InheritEnv...) {
		if v, ok := lookup(k); ok {
			vars[k] = v
		}
	}
	for _, k := range sortedKeys(s.Env) {
		v, err := expandString("env."+k, s.Env[k], lookup)
		if err != nil {
			return nil, err
		}
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for _, k := range sortedKeys(vars) {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

// String names the server without any value of its environment or
// headers.
func (s *Server) String() string {
	if s.Stdio() {
		return fmt.Sprintf("%s (stdio: %s)", s.Name, s.Command)
	}
	return fmt.Sprintf("%s (http: %s)", s.Name, s.URL)
}
