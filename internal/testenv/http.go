package testenv

import (
	"encoding/json"
	"net/http"
	"testing"
)

// GetJSON GETs url and decodes its JSON answer into v. Anything but a 200
// with a body that decodes into v fails the test at once, so a caller reads
// only values the server really sent.
func GetJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
