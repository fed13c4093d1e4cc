package contract_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/contract"
)

// The canonical call is what an approval binds to: the same call written
// in another key order or spacing has the same hash, and a call that
// sends one byte more does not.
func TestCanonicalCallIsOneFormPerCall(t *testing.T) {
	t.Parallel()
	a := json.RawMessage(`{"path":"HELLO.md","content":"hi\n","branch":"capstan/x","n":1.50}`)
	b := json.RawMessage(`{ "n": 1.50, "branch": "capstan/x",
		"content": "hi\n", "path": "HELLO.md" }`)
	formA, hashA, err := contract.CanonicalCall("github_put_file", a)
	if err != nil {
		t.Fatal(err)
	}
	formB, hashB, err := contract.CanonicalCall("github_put_file", b)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"arguments":{"branch":"capstan/x","content":"hi\n","n":1.50,"path":"HELLO.md"},"tool":"github_put_file"}`
	if string(formA) != want || string(formB) != want {
		t.Errorf("canonical forms:\n%s\n%s\nwant %s", formA, formB, want)
	}
	sum := sha256.Sum256([]byte(want))
	if hashA != hex.EncodeToString(sum[:]) || hashB != hashA {
		t.Errorf("hashes %s and %s, want both the sha256 of the canonical form", hashA, hashB)
	}
	_, other, err := contract.CanonicalCall("github_put_file", json.RawMessage(`{"path":"HELLO.md","content":"hi\n ","branch":"capstan/x","n":1.50}`))
	if err != nil || other == hashA {
		t.Errorf("a call with other content has hash %s (err %v), the same as the first's", other, err)
	}
	if _, _, err := contract.CanonicalCall("github_put_file", json.RawMessage(`{"a":1} {"b":2}`)); err == nil {
		t.Error("two JSON values were taken as one call")
	}
}

// Each field shown is capped on its own, on a UTF-8 boundary, with how
// many bytes were left out and the whole field's hash: padding one field
// never pushes another out of sight, and no cut is silent.
func TestCallFieldsCapEachFieldAndSayWhatIsCut(t *testing.T) {
	t.Parallel()
	padding := strings.Repeat("a", contract.CallFieldCap-1) + "é" + strings.Repeat(" ", 100_000)
	args, err := json.Marshal(map[string]any{"content": padding, "path": "HELLO.md", "message": "add a greeting"})
	if err != nil {
		t.Fatal(err)
	}
	fields, err := contract.CallFields(args, contract.CallFieldCap, contract.CallFieldsShown)
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 3 || fields[0].Name != "content" || fields[1].Name != "message" || fields[2].Name != "path" {
		t.Fatalf("fields = %+v, want content, message and path", fields)
	}
	content := fields[0]
	sum := sha256.Sum256([]byte(padding))
	if content.Bytes != len(padding) || content.Value != strings.Repeat("a", contract.CallFieldCap-1) ||
		!utf8.ValidString(content.Value) || content.Hash != hex.EncodeToString(sum[:]) {
		t.Errorf("content field: %d bytes of %d shown, hash %s; want the first %d (the é not split), the whole size and its hash",
			len(content.Value), content.Bytes, content.Hash, contract.CallFieldCap-1)
	}
	shown := contract.FormatCall("github_put_file", "c0ffee", fields)
	for _, want := range []string{
		"tool: github_put_file\n",
		fmt.Sprintf("content (%s bytes): ", "104,097"),
		fmt.Sprintf("… %s more bytes (the whole field's sha256 %s)", "100,002", content.Hash),
		"\nmessage (14 bytes): add a greeting\n",
		"\npath (8 bytes): HELLO.md\n",
		"sha256 of the call: c0ffee",
	} {
		if !strings.Contains(shown, want) {
			t.Errorf("the call as shown lacks %q", want)
		}
	}
	if n := len(shown); n > 3*contract.CallFieldCap {
		t.Errorf("the call as shown is %d bytes, want it capped", n)
	}
}

// More arguments than are shown are named in one last field.
func TestCallFieldsNameTheArgumentsNotShown(t *testing.T) {
	t.Parallel()
	args := map[string]int{}
	for i := range 5 {
		args[fmt.Sprintf("k%d", i)] = i
	}
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	fields, err := contract.CallFields(raw, contract.CallFieldCap, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 4 || fields[2].Name != "k2" || fields[3].Name != "…" || fields[3].Value != "2 more arguments: k3, k4" {
		t.Errorf("fields = %+v, want k0, k1, k2 and one naming k3 and k4", fields)
	}
}
