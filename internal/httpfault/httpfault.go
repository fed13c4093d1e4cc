// Package httpfault holds what an HTTP fault needs to misbehave as a real
// service or network does after a handler acted: close the connection
// without an answer, or hold the answer back. The sandbox's fakes and
// capstantest's middleware for a user's own service share it.
package httpfault

import (
	"bytes"
	"cmp"
	"maps"
	"net/http"
)

// DropConnection closes the client's connection without an answer.
func DropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 and writers that cannot hijack: abort the response,
		// which resets the stream or closes the connection.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// HeldResponse records a response a fault holds back or throws away.
type HeldResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

// NewHeldResponse returns an empty HeldResponse.
func NewHeldResponse() *HeldResponse { return &HeldResponse{header: http.Header{}} }

// Header is the held response's header.
func (h *HeldResponse) Header() http.Header { return h.header }

// WriteHeader keeps the first status written.
func (h *HeldResponse) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

// Write appends p to the held body.
func (h *HeldResponse) Write(p []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return h.body.Write(p)
}

// WriteTo sends the held response to w.
func (h *HeldResponse) WriteTo(w http.ResponseWriter) {
	maps.Copy(w.Header(), h.header)
	w.WriteHeader(cmp.Or(h.status, http.StatusOK))
	_, _ = w.Write(h.body.Bytes())
}
