package sandbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The /_sandbox/faults endpoint: fault rules over HTTP, so a test can steer
// a sandbox running in another process.

// faultRuleJSON is a rule on the wire: durations in Go syntax ("1.5s").
type faultRuleJSON struct {
	Endpoint   string    `json:"endpoint"`
	Kind       FaultKind `json:"kind"`
	Times      int       `json:"times"`
	Status     int       `json:"status,omitempty"`
	Delay      string    `json:"delay,omitempty"`
	Lag        string    `json:"lag,omitempty"`
	RetryAfter string    `json:"retry_after,omitempty"`
	// The model's kinds.
	RetryAfterMS    string `json:"retry_after_ms,omitempty"`
	RefuseFor       string `json:"refuse_for,omitempty"`
	AfterEvents     int    `json:"after_events,omitempty"`
	PromptBytesOver int    `json:"prompt_bytes_over,omitempty"`
}

type faultStateJSON struct {
	faultRuleJSON
	Fired int `json:"fired"`
}

func (j faultRuleJSON) rule() (FaultRule, error) {
	rule := FaultRule{Endpoint: j.Endpoint, Kind: j.Kind, Times: j.Times, Status: j.Status,
		AfterEvents: j.AfterEvents, PromptBytesOver: j.PromptBytesOver}
	for _, d := range []struct {
		name string
		text string
		into *time.Duration
	}{{"delay", j.Delay, &rule.Delay}, {"lag", j.Lag, &rule.Lag}, {"retry_after", j.RetryAfter, &rule.RetryAfter},
		{"retry_after_ms", j.RetryAfterMS, &rule.RetryAfterMsHeader}, {"refuse_for", j.RefuseFor, &rule.RefuseFor}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil {
			return FaultRule{}, fmt.Errorf("sandbox: fault %s: %w", d.name, err)
		}
		*d.into = v
	}
	return rule, nil
}

func faultStateToJSON(st FaultState) faultStateJSON {
	text := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	return faultStateJSON{Fired: st.Fired, faultRuleJSON: faultRuleJSON{Endpoint: st.Endpoint, Kind: st.Kind,
		Times: st.Times, Status: st.Status, Delay: text(st.Delay), Lag: text(st.Lag), RetryAfter: text(st.RetryAfter),
		RetryAfterMS: text(st.RetryAfterMsHeader), RefuseFor: text(st.RefuseFor), AfterEvents: st.AfterEvents, PromptBytesOver: st.PromptBytesOver}}
}

// serveControl is /_sandbox/faults: GET lists the rules, POST adds the one
// rule in the body (answering 201 with it as stored, or 400 with
// {"error": ...}), DELETE clears them all.
func (f *faultRules) serveControl(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		states := f.Faults()
		out := make([]faultStateJSON, 0, len(states))
		for _, st := range states {
			out = append(out, faultStateToJSON(st))
		}
		writeJSONBody(w, http.StatusOK, out)
	case http.MethodPost:
		var in faultRuleJSON
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		err := dec.Decode(&in)
		if err != nil {
			err = fmt.Errorf("sandbox: fault: the body is not one JSON rule: %w", err)
		}
		var rule FaultRule
		if err == nil {
			rule, err = in.rule()
		}
		var st FaultState
		if err == nil {
			st, err = f.addFault(rule)
		}
		if err != nil {
			writeJSONBody(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSONBody(w, http.StatusCreated, faultStateToJSON(st))
	case http.MethodDelete:
		f.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}
