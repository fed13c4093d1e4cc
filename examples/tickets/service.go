package tickets

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ticket is one ticket of the service.
type Ticket struct {
	ID      int       `json:"id"`
	Project string    `json:"project"`
	Title   string    `json:"title"`
	Body    string    `json:"body"`
	Created time.Time `json:"created"`
	// RequestID is the X-Request-Id the ticket was created with: the
	// caller's own name for the request, which the service keeps and can
	// be searched by, but does not deduplicate on — as most services.
	RequestID string `json:"request_id,omitempty"`
}

// Service is a tiny ticket tracker over HTTP, the kind of in-house system a
// team's agent must write to:
//
//	POST /tickets                {"project","title","body"}, header X-Request-Id → 201 and the ticket
//	GET  /tickets?request_id=ID  the tickets created with that request id
//	GET  /tickets/{id}           one ticket
//
// Creating is not idempotent: the same request sent twice makes two
// tickets. That is what makes the tool that calls it unsafe, and why its
// lookup searches by request id.
type Service struct {
	// Now stamps tickets; nil means time.Now.
	Now func() time.Time
	// Created, when set, receives each ticket as it is created, before
	// the answer is written: a test waits on it for the effect.
	Created chan<- Ticket

	mu      sync.Mutex
	tickets []Ticket
}

// Tickets returns a copy of every ticket created so far.
func (s *Service) Tickets() []Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Ticket(nil), s.tickets...)
}

// ServeHTTP serves the API above.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/tickets":
		s.create(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/tickets":
		s.search(w, r.URL.Query().Get("request_id"))
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/tickets/"):
		s.get(w, strings.TrimPrefix(r.URL.Path, "/tickets/"))
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint"})
	}
}

func (s *Service) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Project string `json:"project"`
		Title   string `json:"title"`
		Body    string `json:"body"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Project == "" || in.Title == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "a ticket needs a project and a title"})
		return
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	s.mu.Lock()
	t := Ticket{ID: len(s.tickets) + 1, Project: in.Project, Title: in.Title, Body: in.Body, Created: now(), RequestID: r.Header.Get("X-Request-Id")}
	s.tickets = append(s.tickets, t)
	s.mu.Unlock()
	if s.Created != nil {
		s.Created <- t
	}
	writeJSON(w, http.StatusCreated, t)
}

func (s *Service) search(w http.ResponseWriter, requestID string) {
	if requestID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "search needs request_id"})
		return
	}
	found := []Ticket{}
	for _, t := range s.Tickets() {
		if t.RequestID == requestID {
			found = append(found, t)
		}
	}
	writeJSON(w, http.StatusOK, found)
}

func (s *Service) get(w http.ResponseWriter, id string) {
	n, err := strconv.Atoi(id)
	tickets := s.Tickets()
	if err != nil || n < 1 || n > len(tickets) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no ticket %q", id)})
		return
	}
	writeJSON(w, http.StatusOK, tickets[n-1])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
