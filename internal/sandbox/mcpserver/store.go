package mcpserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// State is everything the sandbox MCP server knows.
type State struct {
	// Tickets are the effects, in the order they were made.
	Tickets []Ticket `json:"tickets"`
	// Calls are every tool call received, in order.
	Calls []Call `json:"calls"`
	// Faults are the faults queued per tool, taken one per call.
	Faults map[string][]string `json:"faults,omitempty"`
	// SchemaVersion, when set, is the create_ticket schema a server
	// started from this state serves (Options.SchemaVersion): a test
	// changes it, kills the server, and the worker starts it again with
	// the other schema.
	SchemaVersion int `json:"schema_version,omitempty"`
	// Cancellations are the notifications/cancelled received, in order.
	Cancellations []Cancellation `json:"cancellations,omitempty"`
}

// Cancellation is one notifications/cancelled received.
type Cancellation struct {
	RequestID string `json:"request_id"`
	Reason    string `json:"reason,omitempty"`
}

// Ticket is one effect.
type Ticket struct {
	ID          string `json:"id"`
	Tool        string `json:"tool"`
	OperationID string `json:"operation_id"`
	Key         string `json:"key,omitempty"`
	Title       string `json:"title"`
}

// Call is one tool call received.
type Call struct {
	Tool        string `json:"tool"`
	OperationID string `json:"operation_id"`
	// ProgressToken is the call's progress token; "" for none.
	ProgressToken string          `json:"progress_token,omitempty"`
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	Fault         string          `json:"fault,omitempty"`
}

func (s State) byOperation(op string) (Ticket, bool) {
	for _, t := range s.Tickets {
		if op != "" && t.OperationID == op {
			return t, true
		}
	}
	return Ticket{}, false
}

// Effects counts the tickets made by tool ("" for every tool).
func (s State) Effects(tool string) int {
	n := 0
	for _, t := range s.Tickets {
		if tool == "" || t.Tool == tool {
			n++
		}
	}
	return n
}

// CallsOf returns the calls of tool.
func (s State) CallsOf(tool string) []Call {
	var out []Call
	for _, c := range s.Calls {
		if c.Tool == tool {
			out = append(out, c)
		}
	}
	return out
}

// Store keeps a State in memory, or in a file when made with OpenFile. Safe
// for concurrent use within a process; the file is replaced atomically, so
// another process (a test) reads a whole state.
type Store struct {
	mu    sync.Mutex
	path  string
	state State
}

// NewStore is a store in memory.
func NewStore() *Store { return &Store{} }

// OpenFile is a store in the file at path, created empty if absent.
func OpenFile(path string) (*Store, error) {
	s := &Store{path: path}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := s.save(State{}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) load() (State, error) {
	if s.path == "" {
		b, _ := json.Marshal(s.state)
		var st State
		_ = json.Unmarshal(b, &st) // a deep copy
		return st, nil
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("sandbox mcp state %s: %w", s.path, err)
	}
	return st, nil
}

func (s *Store) save(st State) error {
	if s.path == "" {
		s.state = st
		return nil
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".mcpstate-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.path)
}

func (s *Store) update(f func(*State)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.load()
	if err != nil {
		return err
	}
	f(&st)
	return s.save(st)
}

// Load returns the state as it stands.
func (s *Store) Load() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load()
}

// Fault queues faults for the next calls of tool.
func (s *Store) Fault(tool string, faults ...string) error {
	return s.update(func(st *State) {
		if st.Faults == nil {
			st.Faults = map[string][]string{}
		}
		st.Faults[tool] = append(st.Faults[tool], faults...)
	})
}

// Call records a call and takes the next fault queued for its tool.
func (s *Store) Call(tool, op, token string, args json.RawMessage) (string, error) {
	var fault string
	err := s.update(func(st *State) {
		if q := st.Faults[tool]; len(q) > 0 {
			fault, st.Faults[tool] = q[0], q[1:]
		}
		st.Calls = append(st.Calls, Call{Tool: tool, OperationID: op, ProgressToken: token, Arguments: args, Fault: fault})
	})
	return fault, err
}

// Make makes a ticket for tool. With a key (upsert_ticket), a repeat with
// the same operation id answers the ticket made and makes none.
func (s *Store) Make(tool, op, key, title string) (Ticket, error) {
	var t Ticket
	err := s.update(func(st *State) {
		if key != "" {
			for _, old := range st.Tickets {
				if old.Tool == tool && old.OperationID == op {
					t = old
					return
				}
			}
		}
		t = Ticket{ID: fmt.Sprintf("T-%d", len(st.Tickets)+1), Tool: tool, OperationID: op, Key: key, Title: title}
		st.Tickets = append(st.Tickets, t)
	})
	return t, err
}

// SetSchemaVersion sets the schema version the next server started from
// this state serves.
func (s *Store) SetSchemaVersion(v int) error {
	return s.update(func(st *State) { st.SchemaVersion = v })
}

// Cancelled records a notifications/cancelled received.
func (s *Store) Cancelled(requestID, reason string) error {
	return s.update(func(st *State) {
		st.Cancellations = append(st.Cancellations, Cancellation{RequestID: requestID, Reason: reason})
	})
}
