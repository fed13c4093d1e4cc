package sandbox

import "net/http"

// wireFormat is what differs between the model's two APIs: how a request is
// read, how an error is written, and how an answer streams.
type wireFormat interface {
	// endpoint is the format's name for fault rules.
	endpoint() string
	// parse reads a request body, or says why the API would reject it.
	parse(body []byte) (modelRequest, *wireError)
	// writeError answers with an error in the format's JSON shape.
	writeError(w http.ResponseWriter, e wireError)
	// encoder renders the events of one answer.
	encoder(model string, req modelRequest, promptBytes int) streamEncoder
}

// errKind is what went wrong, in terms both formats can name.
type errKind int

const (
	errInvalidRequest  errKind = iota // 400 and the 4xx without a kind of their own
	errNotFound                       // an unknown model
	errRateLimit                      // 429 or a rate-limit event
	errOverloaded                     // 503, 529 or an overload event
	errServer                         // any other 5xx
	errContextOverflow                // the prompt is longer than the context
)

// errKindForStatus is the kind a provider means by an HTTP status.
func errKindForStatus(status int) errKind {
	switch {
	case status == http.StatusTooManyRequests:
		return errRateLimit
	case status == http.StatusServiceUnavailable || status == statusOverloaded:
		return errOverloaded
	case status >= 500:
		return errServer
	case status == http.StatusNotFound:
		return errNotFound
	}
	return errInvalidRequest
}

// statusOverloaded is Anthropic's 529 "overloaded".
const statusOverloaded = 529

// wireError is an error answer before it takes a format's shape.
type wireError struct {
	status  int
	kind    errKind
	code    string // OpenAI's code, when the kind alone does not say it
	message string
}

// finishKind is how an answer ends.
type finishKind int

const (
	// finishNatural: "stop" or "tool_calls" (Anthropic: "end_turn" or
	// "tool_use"), as the step's content says.
	finishNatural finishKind = iota
	// finishLength: cut by the token limit, "length" ("max_tokens").
	finishLength
)

// streamEncoder renders the events of one answer in a wire format.
type streamEncoder interface {
	// answer is every event of a complete answer to st, ending as finish
	// says.
	answer(st step, finish finishKind) []frame
	// endlessOpening is what starts an answer whose text never ends.
	endlessOpening() []frame
	// endlessText is one more piece of that text.
	endlessText(text string) frame
	// errorEvent is an error reported inside the stream, under the 200
	// already sent.
	errorEvent(kind errKind, message string) frame
}
