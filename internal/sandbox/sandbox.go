package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// defaultListenAddr lets the kernel pick a free loopback port.
const defaultListenAddr = "127.0.0.1:0"

// Options says where [Start] listens. An empty address means "127.0.0.1:0",
// a free port on loopback.
type Options struct {
	ModelAddr  string // host:port for the model fake
	GitHubAddr string // host:port for the GitHub fake
	SlackAddr  string // host:port for the Slack fake
}

// Sandbox is the three fakes running behind real HTTP servers. The URLs are
// base URLs in the forms the clients capstan uses expect: ModelURL for
// openai-go (".../v1"), AnthropicURL for anthropic-sdk-go (".../", which
// appends "v1/messages"), GitHubURL for go-github (".../"), SlackURL for
// slack-go (".../api/").
type Sandbox struct {
	// The fakes, for counters, inspection and SetFault.
	Model  *Model
	GitHub *GitHub
	Slack  *Slack

	ModelURL     string // "http://host:port/v1"
	AnthropicURL string // "http://host:port/": the model fake, for Anthropic's client
	GitHubURL    string // "http://host:port/"
	SlackURL     string // "http://host:port/api/"

	servers   []*http.Server
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start listens on the given addresses and serves a fresh Model, GitHub and
// Slack fake on each. All listeners are open when Start returns, so the URLs
// can be used at once. If any address cannot be listened on, Start closes the
// ones it opened and returns an error naming the fake and the address. Call
// Close to stop the servers.
func Start(opts Options) (*Sandbox, error) {
	sb := &Sandbox{Model: NewModel(), GitHub: NewGitHub(), Slack: NewSlack()}
	fakes := []struct {
		name    string
		addr    string
		handler http.Handler
		path    string
		url     *string
	}{
		{"model", opts.ModelAddr, sb.Model, "/v1", &sb.ModelURL},
		{"github", opts.GitHubAddr, sb.GitHub, "/", &sb.GitHubURL},
		{"slack", opts.SlackAddr, sb.Slack, "/api/", &sb.SlackURL},
	}

	listeners := make([]net.Listener, 0, len(fakes))
	for _, f := range fakes {
		addr := f.addr
		if addr == "" {
			addr = defaultListenAddr
		}
		listen := func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
		if f.handler == http.Handler(sb.Model) {
			listen = listenShared // FaultRefuseConnection holds the port while closed
		}
		ln, err := listen(addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return nil, fmt.Errorf("sandbox: %s fake: listen on %s: %w", f.name, addr, err)
		}
		listeners = append(listeners, ln)
		*f.url = "http://" + ln.Addr().String() + f.path
	}
	sb.AnthropicURL = strings.TrimSuffix(sb.ModelURL, "v1")

	for i, f := range fakes {
		srv := &http.Server{
			Handler: f.handler,
			// Bounds a client that opens a connection and never sends
			// a request; there is no write timeout because the model
			// fake streams and faults may stall on purpose.
			ReadHeaderTimeout: 10 * time.Second,
		}
		sb.servers = append(sb.servers, srv)
		ln := listeners[i]
		if f.handler == http.Handler(sb.Model) {
			// FaultRefuseConnection closes and reopens the model's port.
			ln = sb.Model.door.wrap(ln)
			srv.ConnState = sb.Model.door.connState
		}
		sb.wg.Go(func() {
			// Serve returns ErrServerClosed after Close; there is no
			// other failure to report for an already-open listener.
			_ = srv.Serve(ln)
		})
	}
	return sb, nil
}

// Close stops all three servers at once, cutting open connections (a stalled
// stream would otherwise hold a graceful shutdown forever), releases every
// answer a FaultDelay holds, and waits for the servers and those handlers to
// exit. It is safe to call more than once.
func (sb *Sandbox) Close() error {
	sb.closeOnce.Do(func() {
		var errs []error
		for _, srv := range sb.servers {
			if err := srv.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		sb.wg.Wait()
		sb.Model.shutdown()
		sb.GitHub.shutdown()
		sb.Slack.shutdown()
		if len(errs) > 0 {
			sb.closeErr = fmt.Errorf("sandbox: close: %w", errors.Join(errs...))
		}
	})
	return sb.closeErr
}

// writeJSONBody writes v as a JSON response. Encoding errors cannot happen for
// the plain values the fakes build, and a write error means the client left,
// so neither is reported.
func writeJSONBody(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
