package contract

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file is the canonical call a person approves (docs/design.md §5.9):
// the tool's name and every argument as it will be sent, its SHA-256, and
// the fields a person reads, each capped so that no field can hide
// another, and no cut is silent.

// CallFieldCap is how many bytes of one argument the approval request
// shows (the Temporal UI's current details, the Slack notice, `starter
// status`); `starter show TASK OP` prints the whole call.
const CallFieldCap = 4096

// CallFieldsShown is how many arguments the approval request shows; more
// are counted in one last field that names them.
const CallFieldsShown = 64

// CallField is one argument of a canonical call as a person reads it.
type CallField struct {
	// Name is the argument's name.
	Name string `json:"name"`
	// Value is the argument's text (a string as it is, anything else as
	// canonical JSON), at most CallFieldCap bytes of it.
	Value string `json:"value"`
	// Bytes is the length of the whole value.
	Bytes int `json:"bytes"`
	// Hash, set only when Value was cut, is the SHA-256 of the whole
	// value.
	Hash string `json:"hash,omitempty"`
}

// Cut is how many bytes of the field's value are not shown.
func (f CallField) Cut() int { return f.Bytes - len(f.Value) }

// CanonicalCall is the call of tool with args in one canonical form: a
// JSON object {"arguments": …, "tool": …} with every object's keys sorted,
// numbers as written, no insignificant space; and its SHA-256 in hex.
// Two calls that send the same thing have the same form, whatever order or
// spacing the model wrote.
func CanonicalCall(tool string, args json.RawMessage) ([]byte, string, error) {
	v, err := decodeCanonical(args)
	if err != nil {
		return nil, "", fmt.Errorf("arguments of %s: %w", tool, err)
	}
	data, err := encodeCanonical(map[string]any{"tool": tool, "arguments": v})
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), nil
}

// CallFields are the arguments args of a call as a person reads them, in
// name order, each value cut at max bytes (on a UTF-8 boundary). At most
// fields are listed; a last field named "…" then names the rest, so none
// is left out silently.
func CallFields(args json.RawMessage, max, fields int) ([]CallField, error) {
	v, err := decodeCanonical(args)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		text, err := fieldText(v)
		if err != nil {
			return nil, err
		}
		return []CallField{capField("arguments", text, max)}, nil
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]CallField, 0, min(len(names), fields+1))
	for i, k := range names {
		if i == fields {
			rest := strings.Join(names[i:], ", ")
			out = append(out, capField("…", fmt.Sprintf("%d more arguments: %s", len(names)-i, rest), max))
			break
		}
		text, err := fieldText(obj[k])
		if err != nil {
			return nil, err
		}
		out = append(out, capField(k, text, max))
	}
	return out, nil
}

func capField(name, text string, max int) CallField {
	f := CallField{Name: name, Value: text, Bytes: len(text)}
	if len(text) <= max {
		return f
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(text))
	f.Value, f.Hash = text[:cut], hex.EncodeToString(sum[:])
	return f
}

// FormatCallField is one field as the approval request shows it: its name
// and size, its value, and, when cut, how much is left out and the whole
// value's hash. The value starts on a line of its own when it has several.
func FormatCallField(f CallField) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s bytes):", f.Name, thousands(f.Bytes))
	if strings.Contains(f.Value, "\n") {
		b.WriteString("\n")
	} else {
		b.WriteString(" ")
	}
	b.WriteString(f.Value)
	if f.Cut() > 0 {
		fmt.Fprintf(&b, "… %s more bytes (the whole field's sha256 %s)", thousands(f.Cut()), f.Hash)
	}
	return b.String()
}

// FormatCall is the call of tool as the approval request shows it: the
// tool, each field (FormatCallField) and the call's hash, one line (or
// block) each.
func FormatCall(tool, hash string, fields []CallField) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tool: %s\n", tool)
	for _, f := range fields {
		b.WriteString(FormatCallField(f))
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "sha256 of the call: %s", hash)
	return b.String()
}

// fieldText is an argument's value as text: a string as it is, anything
// else as canonical JSON.
func fieldText(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	data, err := encodeCanonical(v)
	return string(data), err
}

func decodeCanonical(data json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

// encodeCanonical writes v (maps, slices, strings, json.Number, bools,
// nil) as JSON: map keys sorted (encoding/json sorts them), no HTML
// escaping, no trailing newline.
func encodeCanonical(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// thousands writes n with commas between its groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
