package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/httpfault"
)

// FaultKind says what a [FaultRule] does to a request it applies to.
type FaultKind string

const (
	// FaultFail answers with a 5xx status before the fake acts: nothing
	// changes.
	FaultFail FaultKind = "fail"
	// FaultDrop lets the fake act, then closes the connection without an
	// answer: the effect happened and the client cannot know.
	FaultDrop FaultKind = "drop"
	// FaultDelay lets the fake act, then holds the answer for Delay. Make
	// Delay longer than the caller's timeout to make it give up after the
	// effect. The held answer is dropped when the client leaves, the request
	// context ends or the [Sandbox] closes, so nothing outlives the servers.
	FaultDelay FaultKind = "delay"
	// FaultLag makes a read lag behind writes: it leaves out what was
	// written less than Lag ago (see the fakes for which reads honour it).
	FaultLag FaultKind = "lag"
	// FaultRateLimit answers with the fake's rate-limit refusal before it
	// acts: nothing changes. GitHub: 429 (or Status 403) with
	// x-ratelimit-remaining: 0 and x-ratelimit-reset; Slack: 429 with
	// Retry-After and {"ok":false,"error":"ratelimited"}.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultSecondaryRateLimit (GitHub only) answers 403 with Retry-After and
	// GitHub's "You have exceeded a secondary rate limit" message before the
	// fake acts: nothing changes.
	FaultSecondaryRateLimit FaultKind = "secondary_rate_limit"
)

// defaultRetryAfter is what the rate-limit kinds tell the client when the
// rule does not say.
const defaultRetryAfter = time.Minute

// FaultRule injects one kind of fault into requests to one endpoint of the
// GitHub, Slack or model fake. Rules apply in the order they were added: a request
// gets the oldest rule for its endpoint that is not yet spent. A rule runs
// after the [Fault] installed with SetFault, if that one let the request
// through.
type FaultRule struct {
	// Endpoint names the endpoint: for GitHub, the operation id in GitHub's
	// REST description ("pulls/create"); for Slack, the method
	// ("chat.postMessage"); for the model, the wire format's path without
	// its version ("chat/completions", "messages"). The fakes'
	// documentation lists them.
	Endpoint string
	Kind     FaultKind
	// Times is how many matching requests the rule applies to, counted from
	// when it is added; 0 means every matching request until the rules are
	// cleared.
	Times int
	// Status is the status of FaultFail (500 to 599; default 500), of
	// GitHub's FaultRateLimit (429, the default, or 403) and of the model's
	// FaultStatus (400 to 599, required). Other kinds leave it zero.
	Status int
	// Delay is how long FaultDelay holds the answer. Required for it, zero
	// for the other kinds.
	Delay time.Duration
	// Lag is how far FaultLag reads lag behind writes. Required for it,
	// zero for the other kinds.
	Lag time.Duration
	// RetryAfter is when the rate-limit kinds tell the client to come back,
	// rounded up to whole seconds (default one minute). The model's
	// FaultStatus sends it as Retry-After only when it is set. Zero for the
	// other kinds.
	RetryAfter time.Duration
	// RetryAfterMsHeader (the model's FaultStatus only) sends retry-after-ms, in
	// whole milliseconds rounded up, when it is set.
	RetryAfterMsHeader time.Duration
	// AfterEvents (the model's FaultStall, FaultOverloadedEvent and
	// FaultRateLimitEvent) is how many server-sent events go out before the
	// fault strikes; the answer's closing events are never sent, so a
	// larger number means "just before the end".
	AfterEvents int
	// RefuseFor (the model's FaultRefuseConnection only, and required
	// there) is how long its port stays closed.
	RefuseFor time.Duration
	// PromptBytesOver (the model's FaultContextOverflow only), when
	// positive, limits the rule to requests whose body is longer than this
	// many bytes: smaller requests pass untouched and do not count toward
	// Times, so a test can watch compaction make a prompt fit.
	PromptBytesOver int
}

// FaultState is a rule as a fake holds it: with its defaults filled in, and
// how many requests it has applied to so far. A spent rule stays listed, so a
// test can see that it fired, until the rules are cleared.
type FaultState struct {
	FaultRule
	Fired int
}

// faultDialect is what differs between the fakes that take rules.
type faultDialect struct {
	endpoints []string    // what FaultRule.Endpoint may name
	lagging   []string    // the endpoints whose reads honour FaultLag
	kinds     []FaultKind // the kinds this fake can inject
	// check validates a rule's Status for the refusals and fills in the
	// fake's default.
	check func(rule *FaultRule) error
	// refuse answers a FaultFail or rate-limit rule in the fake's own
	// words, without acting.
	refuse func(w http.ResponseWriter, rule FaultRule)
	// added, when set, runs (under the rules' lock) for each rule added,
	// for a fault that acts at once rather than per request.
	added func(st *FaultState)
}

// faultRules holds a fake's rules and applies them per endpoint. Its methods
// are safe for concurrent use.
type faultRules struct {
	dialect faultDialect

	mu     sync.Mutex
	rules  []*FaultState
	closed bool          // set by shutdown; no answer is held after it
	stop   chan struct{} // closed by shutdown
	held   sync.WaitGroup
	onHold func() // for tests: runs when an answer starts being held
}

// initFaultRules readies the embedded rules of a new fake.
func (f *faultRules) initFaultRules(d faultDialect) {
	f.dialect = d
	f.stop = make(chan struct{})
}

// AddFault adds a rule, or returns an error saying what is wrong with it.
func (f *faultRules) AddFault(rule FaultRule) error {
	_, err := f.addFault(rule)
	return err
}

func (f *faultRules) addFault(rule FaultRule) (FaultState, error) {
	if err := f.validate(&rule); err != nil {
		return FaultState{}, fmt.Errorf("sandbox: fault %s on %q: %w", rule.Kind, rule.Endpoint, err)
	}
	st := &FaultState{FaultRule: rule}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, st)
	if f.dialect.added != nil {
		f.dialect.added(st)
	}
	return *st, nil // copied under the lock: a request may fire the rule at once
}

// ClearFaults removes every rule. An answer already held by FaultDelay is
// still delivered when its delay ends.
func (f *faultRules) ClearFaults() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

// Faults returns the rules in the order they apply.
func (f *faultRules) Faults() []FaultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FaultState, 0, len(f.rules))
	for _, st := range f.rules {
		out = append(out, *st)
	}
	return out
}

// validate checks rule against the dialect and fills in defaults.
func (f *faultRules) validate(rule *FaultRule) error {
	if !slices.Contains(f.dialect.endpoints, rule.Endpoint) {
		return fmt.Errorf("unknown endpoint; this fake has %s", strings.Join(f.dialect.endpoints, ", "))
	}
	return validateFault(f.dialect, rule)
}

// validateFault checks everything in rule but its endpoint against the
// dialect and fills in defaults. The model's scripted step faults, which
// have no endpoint, are checked with it too.
func validateFault(d faultDialect, rule *FaultRule) error {
	kindIs := func(kinds ...FaultKind) bool { return slices.Contains(kinds, rule.Kind) }
	refusal := kindIs(FaultFail, FaultRateLimit, FaultSecondaryRateLimit, FaultStatus)
	switch {
	case !slices.Contains(d.kinds, rule.Kind):
		return fmt.Errorf("unknown kind; this fake injects %s", joinKinds(d.kinds))
	case rule.Times < 0:
		return errors.New("times must not be negative")
	case rule.Delay < 0 || rule.Lag < 0 || rule.RetryAfter < 0 || rule.RetryAfterMsHeader < 0:
		return errors.New("durations must not be negative")
	case rule.AfterEvents < 0 || rule.PromptBytesOver < 0:
		return errors.New("after_events and prompt_bytes_over must not be negative")
	case rule.AfterEvents != 0 && !kindIs(FaultStall, FaultOverloadedEvent, FaultRateLimitEvent):
		return errors.New("after_events is only for kinds stall, overloaded_event and rate_limit_event")
	case rule.PromptBytesOver != 0 && !kindIs(FaultContextOverflow):
		return errors.New("prompt_bytes_over is only for kind context_overflow")
	case rule.RetryAfterMsHeader != 0 && !kindIs(FaultStatus):
		return errors.New("retry_after_ms is only for kind status")
	case rule.RefuseFor < 0:
		return errors.New("durations must not be negative")
	case (rule.RefuseFor != 0) != kindIs(FaultRefuseConnection):
		return errors.New("refuse_for is required by kind refuse_connection and only allowed there")
	case rule.Kind == FaultRefuseConnection && rule.Times != 0:
		return errors.New("refuse_connection closes the port once: times must be 0")
	case (rule.Delay != 0) != kindIs(FaultDelay):
		return errors.New("delay is required by kind delay and only allowed there")
	case (rule.Lag != 0) != kindIs(FaultLag):
		return errors.New("lag is required by kind lag and only allowed there")
	case rule.Kind == FaultLag && !slices.Contains(d.lagging, rule.Endpoint):
		return fmt.Errorf("this endpoint does not lag; lagging reads are %s", strings.Join(d.lagging, ", "))
	case rule.RetryAfter != 0 && !kindIs(FaultRateLimit, FaultSecondaryRateLimit, FaultStatus):
		return errors.New("retry_after is only for the rate-limit kinds and status")
	case rule.Status != 0 && !refusal:
		return errors.New("status is only for kinds fail, rate_limit and status")
	}
	switch rule.Kind {
	case FaultFail:
		if rule.Status == 0 {
			rule.Status = http.StatusInternalServerError
		}
		if rule.Status < 500 || rule.Status > 599 {
			return errors.New("status must be 500 to 599")
		}
	case FaultStatus:
		if rule.Status < 400 || rule.Status > 599 {
			return errors.New("status must be 400 to 599")
		}
	case FaultRateLimit, FaultSecondaryRateLimit:
		if rule.RetryAfter == 0 {
			rule.RetryAfter = defaultRetryAfter
		}
		return d.check(rule)
	}
	return nil
}

func joinKinds(kinds []FaultKind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// take returns the rule that applies to this request to endpoint, counting
// it as fired, or false when none does. A rule that applies must also pass
// applies, when that is not nil.
func (f *faultRules) take(endpoint string, applies func(FaultRule) bool) (FaultRule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.rules {
		if st.Endpoint == endpoint && (st.Times == 0 || st.Fired < st.Times) && (applies == nil || applies(st.FaultRule)) {
			st.Fired++
			return st.FaultRule, true
		}
	}
	return FaultRule{}, false
}

// serveEndpoint serves a request to endpoint through the rule that applies to
// it, if any. act is the fake's handler: the effect, its counters and its
// answer. A refusal never calls act; drop and delay call it exactly once, so
// the counters record the effect once although the client never learns of
// it.
func (f *faultRules) serveEndpoint(endpoint string, w http.ResponseWriter, r *http.Request, act http.Handler) {
	rule, ok := f.take(endpoint, nil)
	if !ok {
		act.ServeHTTP(w, r)
		return
	}
	switch rule.Kind {
	case FaultDrop:
		act.ServeHTTP(httpfault.NewHeldResponse(), r)
		httpfault.DropConnection(w)
	case FaultDelay:
		held := httpfault.NewHeldResponse()
		act.ServeHTTP(held, r)
		f.answerLate(w, r, held, rule.Delay)
	case FaultLag:
		act.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), lagKey{}, rule.Lag)))
	default:
		f.dialect.refuse(w, rule)
	}
}

// answerLate writes held after delay, unless the client leaves, the request
// context ends or the fake shuts down first; then it drops the connection.
func (f *faultRules) answerLate(w http.ResponseWriter, r *http.Request, held *httpfault.HeldResponse, delay time.Duration) {
	// Reading the body to its end lets the server watch the connection,
	// so a client that hangs up ends r.Context().
	_, _ = io.Copy(io.Discard, r.Body)
	if !f.startHold() {
		httpfault.DropConnection(w)
		return
	}
	defer f.held.Done()

	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		held.WriteTo(w)
	case <-r.Context().Done():
		httpfault.DropConnection(w)
	case <-f.stop:
		httpfault.DropConnection(w)
	}
}

// startHold registers a handler that is about to wait for its client, the
// request or the fake's shutdown, and runs the onHold hook. It returns false,
// registering nothing, once the fake has shut down: the handler must not
// wait then. After true the caller must call f.held.Done when it stops
// waiting.
func (f *faultRules) startHold() bool {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return false
	}
	f.held.Add(1)
	onHold := f.onHold
	f.mu.Unlock()
	if onHold != nil {
		onHold()
	}
	return true
}

// holdUntilGone keeps the request open until the client leaves, the
// request's context ends or the fake shuts down, then drops the connection.
// It never polls: it waits on those three events only. The caller has read
// the body to its end, so the server watches the connection and a client
// that hangs up ends r.Context().
func (f *faultRules) holdUntilGone(w http.ResponseWriter, r *http.Request) {
	if !f.startHold() {
		httpfault.DropConnection(w)
		return
	}
	defer f.held.Done()
	select {
	case <-r.Context().Done():
	case <-f.stop:
	}
	httpfault.DropConnection(w)
}

// shutdown releases every held answer and waits until their handlers have
// returned; later delays give up at once. Sandbox.Close calls it.
func (f *faultRules) shutdown() {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.stop)
	}
	f.mu.Unlock()
	f.held.Wait()
}

// lagKey carries a FaultLag's lag to the read it applies to.
type lagKey struct{}

// lagCutoff returns the instant after which writes are not yet visible to
// the read r, when a FaultLag applies to it.
func lagCutoff(r *http.Request, now time.Time) (time.Time, bool) {
	lag, ok := r.Context().Value(lagKey{}).(time.Duration)
	if !ok {
		return time.Time{}, false
	}
	return now.Add(-lag), true
}

// retryAfterSeconds is d in whole seconds, rounded up, as Retry-After wants.
func retryAfterSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
