package sandbox

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxFakeRequestBytes bounds a request body the fakes will read.
const maxFakeRequestBytes = 32 << 20

// argumentFragmentBytes is the most bytes of tool-call arguments sent in one
// chunk. It is small on purpose: real providers split arguments at arbitrary
// points, and clients must accumulate fragments rather than expect whole JSON.
const argumentFragmentBytes = 16

// Model is a fake model provider that speaks two wire formats: OpenAI's
// streaming Chat Completions (POST /v1/chat/completions or /chat/completions)
// and Anthropic's streaming Messages (POST /v1/messages or /messages). Either
// way it plays the script the request's model field names. It also serves
// GET /_sandbox/stats ([ModelStats]) and /_sandbox/faults ([FaultRule]s on
// the endpoints "chat/completions" and "messages").
//
// Model is stateless across requests apart from its counters and fault
// rules: the step played is the number of assistant messages in the request,
// so retrying a request replays the same step. It accepts any Authorization,
// x-api-key or anthropic-version header and needs none. It is safe for
// concurrent use.
type Model struct {
	faultPoint
	faultRules
	door    modelDoor                   // the port, for FaultRefuseConnection
	control map[string]http.HandlerFunc // the /_sandbox/ endpoints

	mu    sync.Mutex
	now   func() time.Time // stamps the request log
	stats ModelStats
	// fixedUsage is the usage every answer reports, set by SetUsage; nil
	// for the estimate.
	fixedUsage *fixedUsage
	log        []*ModelRequest // the newest maxRequestLog requests
	last       []byte
	stepFired  map[stepKey]int // how often each scripted step's fault struck
	scripts    map[string]*script
}

// ModelStats counts what the model fake has done.
type ModelStats struct {
	// Requests is the number of completion requests the fake received, in
	// either wire format: counted once the body has been read, before
	// anything else, so it includes the requests it rejected (bad JSON,
	// unknown script, ...) and every request a fault rule or a scripted
	// step's fault answered (reset, held, stalled, refused with a status,
	// ...). Only a request a [Fault] installed with SetFault answered in
	// the fake's place is not counted.
	Requests int64 `json:"requests"`
	// OpenAIRequests and AnthropicRequests split Requests by wire format.
	OpenAIRequests    int64 `json:"openai_requests"`
	AnthropicRequests int64 `json:"anthropic_requests"`
	// Faulted is the number of requests a fault rule or a scripted step's
	// fault answered.
	Faulted int64 `json:"faulted"`
	// StreamsCompleted is the number of streams written through to their
	// last event ("data: [DONE]", or Anthropic's message_stop), faulted
	// answers that end cleanly (empty, max_tokens, malformed_arguments,
	// unknown_tool) included. (A connection lost during the very last
	// flush is still counted.)
	StreamsCompleted int64 `json:"streams_completed"`
	// ToolCallsEmitted is the number of tool calls whose every argument
	// fragment was written.
	ToolCallsEmitted int64 `json:"tool_calls_emitted"`
	// ScriptRequests counts valid requests per known script name.
	ScriptRequests map[string]int64 `json:"script_requests"`
}

// ModelRequest is one completion request as the fake received it, so a test
// can check how many attempts a client made, when, and what answered them.
type ModelRequest struct {
	// At is when the fake had read the request's body.
	At time.Time `json:"at"`
	// Endpoint is the wire format: "chat/completions" or "messages".
	Endpoint string `json:"endpoint"`
	// Script and Step (0-based) are what the request asked to play; Script
	// is empty when the request was rejected before a script was found.
	Script string `json:"script,omitempty"`
	Step   int    `json:"step"`
	// Fault is the kind of the fault rule or step fault that answered the
	// request, empty when none did.
	Fault FaultKind `json:"fault,omitempty"`
}

// maxRequestLog bounds the request log; older requests are forgotten.
const maxRequestLog = 10000

// stepKey names one step of one script, for step faults with a count.
type stepKey struct {
	script string
	step   int
}

// The model's fault-rule endpoints: each wire format's path, unversioned.
const (
	openAIEndpoint    = "chat/completions"
	anthropicEndpoint = "messages"
)

// NewModel returns a model fake with zeroed counters and no fault.
func NewModel() *Model {
	m := &Model{now: time.Now, stats: ModelStats{ScriptRequests: map[string]int64{}}, stepFired: map[stepKey]int{}}
	d := modelFaultDialect
	d.added = func(st *FaultState) {
		if st.Kind == FaultRefuseConnection {
			m.door.refuse(st.RefuseFor)
			st.Fired++
		}
	}
	m.initFaultRules(d)
	m.control = map[string]http.HandlerFunc{
		"stats":    statsHandler(m.Stats),
		"faults":   m.serveControl,
		"requests": statsHandler(m.Requests),
	}
	return m
}

// Requests returns the completion requests received, oldest first: the last
// 10000, each as [ModelStats.Requests] counts it. GET /_sandbox/requests
// serves the same list.
func (m *Model) Requests() []ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ModelRequest, len(m.log))
	for i, r := range m.log {
		out[i] = *r
	}
	return out
}

// shutdown keeps the port closed if a refusal closed it, and releases
// every held request. Sandbox.Close calls it.
func (m *Model) shutdown() {
	m.door.shutdown()
	m.faultRules.shutdown()
}

// Stats returns a snapshot of the counters.
func (m *Model) Stats() ModelStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.ScriptRequests = maps.Clone(m.stats.ScriptRequests)
	return s
}

// LastRequest returns a copy of the body of the last completion request the
// fake handled (nil if none), so tests can check what a client sent.
func (m *Model) LastRequest() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.last...)
}

// ServeHTTP implements [http.Handler]. GET /_sandbox/stats returns the
// counters; the installed fault, if any, runs before anything else is read
// or counted; fault rules and step faults apply once the request is read,
// parsed and counted.
func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveFake(w, r, &m.faultPoint, m.control, http.HandlerFunc(m.serve))
}

// wireFor returns the wire format a path asks for.
func wireFor(path string) (wireFormat, bool) {
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		return openAIWire{}, true
	case "/v1/messages", "/messages":
		return anthropicWire{}, true
	}
	return nil, false
}

// modelRequest is what the fake needs from a request, in either format.
type modelRequest struct {
	model        string
	stream       bool
	assistants   int    // assistant messages: the step to play
	taskID       string // from the system message, for {{task_id}}
	includeUsage bool   // OpenAI's stream_options.include_usage
	// usage, when set, is the usage every answer reports (SetUsage)
	// instead of the estimate from the bytes.
	usage *fixedUsage
}

// fixedUsage is the input and output tokens an answer reports.
type fixedUsage struct{ input, output int }

// SetUsage makes every complete answer report input and output tokens as
// its usage, whatever its size, so a test can count a budget exactly;
// SetUsage(0, 0) goes back to the estimate (about 4 bytes a token).
func (m *Model) SetUsage(input, output int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fixedUsage = nil
	if input > 0 || output > 0 {
		m.fixedUsage = &fixedUsage{input: input, output: output}
	}
}

// serve handles a request that no SetFault fault answered.
func (m *Model) serve(w http.ResponseWriter, r *http.Request) {
	wire, ok := wireFor(r.URL.Path)
	if !ok {
		openAIWire{}.writeError(w, wireError{status: http.StatusNotFound, kind: errInvalidRequest, code: "unknown_url",
			message: fmt.Sprintf("Unknown request URL: %s %s. The sandbox model serves POST /v1/chat/completions and POST /v1/messages.",
				r.Method, r.URL.Path)})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		wire.writeError(w, wireError{status: http.StatusMethodNotAllowed, kind: errInvalidRequest, code: "method_not_allowed",
			message: fmt.Sprintf("Method %s is not allowed; use POST.", r.Method)})
		return
	}
	// Reading the body to its end also lets the server watch the
	// connection, so a client that hangs up ends r.Context(): the faults
	// that hold a request rely on it.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFakeRequestBytes))

	rec := m.record(wire.endpoint(), body, err)
	if err != nil {
		wire.writeError(w, wireError{status: http.StatusBadRequest, kind: errInvalidRequest,
			message: "Could not read the request body: " + err.Error()})
		return
	}
	if m.door.isRefusing() {
		// It came on a connection opened before the port closed.
		m.noteFault(rec, FaultRefuseConnection)
		resetConnection(w)
		return
	}
	req, werr := wire.parse(body)
	if werr == nil && !req.stream {
		werr = &wireError{status: http.StatusBadRequest, kind: errInvalidRequest,
			message: `The sandbox model only streams: set "stream": true.`}
	}
	if werr != nil {
		wire.writeError(w, *werr)
		return
	}
	sc, ok := m.lookupScript(req.model)
	if !ok {
		wire.writeError(w, wireError{status: http.StatusNotFound, kind: errNotFound, code: "model_not_found",
			message: fmt.Sprintf("The model `%s` does not exist. The sandbox model knows the scripts %s, and turns-N for 1 <= N <= %d.",
				req.model, strings.Join(ScriptNames(), ", "), maxTurns)})
		return
	}
	m.mu.Lock()
	m.stats.ScriptRequests[sc.Name]++
	rec.Script, rec.Step = sc.Name, req.assistants
	req.usage = m.fixedUsage
	m.mu.Unlock()

	st := sc.stepAt(req.assistants).expand(req.taskID)
	enc := wire.encoder(sc.Name, req, len(body))
	if rule, ok := m.chooseFault(wire.endpoint(), len(body), sc.Name, req.assistants, st); ok {
		m.noteFault(rec, rule.Kind)
		m.serveFault(w, r, wire, enc, st, rule, len(body))
		return
	}
	m.play(w, enc.answer(st, finishNatural))
}

// record counts a request whose body has been read (or failed to be) and
// logs it; the caller fills in the returned entry under m.mu.
func (m *Model) record(endpoint string, body []byte, readErr error) *ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := &ModelRequest{At: m.now(), Endpoint: endpoint}
	if len(m.log) >= maxRequestLog {
		m.log = slices.Delete(m.log, 0, len(m.log)-maxRequestLog+1)
	}
	m.log = append(m.log, rec)
	m.stats.Requests++
	if endpoint == anthropicEndpoint {
		m.stats.AnthropicRequests++
	} else {
		m.stats.OpenAIRequests++
	}
	if readErr == nil {
		m.last = body
	}
	return rec
}

// noteFault counts a request a fault answered.
func (m *Model) noteFault(rec *ModelRequest, kind FaultKind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Faulted++
	rec.Fault = kind
}

// AddScript makes the script data describes playable on m alone, beside
// the embedded ones: data is a script in the embedded scripts' JSON form
// ({"name": ..., "steps": [{"text": ..., "tool_calls": [{"name": ...,
// "arguments": {...}}]}]}), checked as they are, {{task_id}} included.
// A script of the same name added before is replaced; an embedded
// script's name, or a turns-N one, cannot be taken.
func (m *Model) AddScript(data []byte) error {
	sc, err := parseScript(data)
	if err != nil {
		return fmt.Errorf("sandbox: script: %w", err)
	}
	if _, ok := scriptsByName[sc.Name]; ok {
		return fmt.Errorf("sandbox: script %q: an embedded script has that name", sc.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.scripts == nil {
		m.scripts = map[string]*script{}
	}
	m.scripts[sc.Name] = sc
	return nil
}

// lookupScript resolves a model name: a script added for a test, an embedded
// one, or a generated turns-N.
func (m *Model) lookupScript(name string) (*script, bool) {
	m.mu.Lock()
	s, ok := m.scripts[name]
	m.mu.Unlock()
	if ok {
		return s, true
	}
	return lookupScript(name)
}

// frame is one server-sent event of an answer, ready to write.
type frame struct {
	text string // the whole event with its blank line
	// closing marks the events that end an answer (OpenAI: the finish
	// reason, usage and [DONE]; Anthropic: message_delta and
	// message_stop). A stall or an error event strikes before the first.
	closing bool
	// toolCallDone marks the last event of a tool call: once it is
	// written, the call counts as emitted.
	toolCallDone bool
	// last marks the stream's final event: once it is written, the stream
	// counts as completed.
	last bool
}

// dataFrame is an event with only a data line, as OpenAI sends them.
func dataFrame(data string) frame { return frame{text: "data: " + data + "\n\n"} }

// startStream sends the headers of an event stream, flushed, so a client
// has them even if no event follows.
func startStream(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	out := &sseWriter{w: w, rc: http.NewResponseController(w)}
	out.flush()
	return out
}

// play writes frames as one event stream and reports whether every frame
// was written. It stops at the first write error (the client went away);
// such a stream is not counted as completed, and only tool calls written in
// full count as emitted.
func (m *Model) play(w http.ResponseWriter, frames []frame) bool {
	return m.playOn(startStream(w), frames)
}

// playOn writes frames on a stream whose headers are already out.
func (m *Model) playOn(out *sseWriter, frames []frame) bool {
	for _, f := range frames {
		out.write(f.text)
		if out.err != nil {
			return false
		}
		// Counted once buffered and before the flush, so a client that
		// has read the event always finds the count.
		if f.toolCallDone || f.last {
			m.mu.Lock()
			if f.toolCallDone {
				m.stats.ToolCallsEmitted++
			}
			if f.last {
				m.stats.StreamsCompleted++
			}
			m.mu.Unlock()
		}
		out.flush()
	}
	return out.err == nil
}

// sseWriter writes events and flushes each one, so the client sees every
// event as it is produced. After the first error it writes nothing.
type sseWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (s *sseWriter) write(event string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, event)
	}
}

// flush pushes buffered events to the client. A writer that cannot flush
// (a fault's recorder, say) is not an error: the events go out when the
// handler returns.
func (s *sseWriter) flush() {
	if s.err != nil {
		return
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
}

// estimateTokens is roughly four bytes a token: close enough for a sandbox,
// and always positive so clients see that usage arrived.
func estimateTokens(bytes int) int { return bytes/4 + 1 }

// completionBytes is the size of what a step says, for its usage.
func completionBytes(st step) int {
	n := len(st.Text)
	for _, tc := range st.ToolCalls {
		n += len(tc.Name) + len(tc.Arguments)
	}
	return n
}

// splitWords splits text into pieces that each end after a space, so that
// their concatenation is exactly text.
func splitWords(text string) []string {
	if text == "" {
		return nil
	}
	return strings.SplitAfter(text, " ")
}

// splitFragments cuts s into pieces of at most n bytes, never inside a UTF-8
// sequence (a cut rune could not travel inside a JSON string).
func splitFragments(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		end := min(n, len(s))
		for end < len(s) && end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		if end == 0 { // a single rune longer than n bytes
			_, end = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}
