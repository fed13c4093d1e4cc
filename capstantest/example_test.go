package capstantest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/capstanhq/capstan/capstantest"
)

// A service of the user's own that creates tickets loses its first answer
// after acting: the client sees an error although the ticket exists, which
// is what a tool's lookup must find before capstan sends the call again.
func ExampleFaults() {
	var tickets atomic.Int64
	service := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := tickets.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id": %d}`, n)
	})
	faults := capstantest.NewFaults(service)
	defer faults.Close()
	faults.DropAfterActing(http.MethodPost, "/tickets", 1)
	srv := httptest.NewServer(faults)
	defer srv.Close()

	_, err := http.Post(srv.URL+"/tickets", "application/json", strings.NewReader(`{"title": "printer"}`))
	fmt.Println("first call failed:", err != nil)
	fmt.Println("tickets created:", tickets.Load())

	resp, err := http.Post(srv.URL+"/tickets", "application/json", strings.NewReader(`{"title": "printer"}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("second call:", resp.Status)
	fmt.Println("requests received:", faults.Requests(http.MethodPost, "/tickets"))
	// Output:
	// first call failed: true
	// tickets created: 1
	// second call: 201 Created
	// requests received: 2
}
