package activities_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// These tests hold the activities to docs/design.md §5.4 where the answer of an
// external system is ambiguous or a refusal: a rate limit did nothing; an
// idempotent write whose answer was lost is settled by reading it back.

// appError returns the application error err carries, or fails the test.
func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("err = %v, want an application error", err)
	}
	return appErr
}

// landThenDrop lets the fake act on the request, then drops the connection
// before any answer: the write happened, and the client cannot know.
func landThenDrop(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	next.ServeHTTP(&discard{header: http.Header{}}, r)
	return drop(w)
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) bool {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // drops it too
	}
	_ = conn.Close()
	return true
}

// gitBlobSHA is git's blob id of content: what GitHub reports for a file.
func gitBlobSHA(content string) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00%s", len(content), content)
	return hex.EncodeToString(h.Sum(nil))
}

func (f *fixture) op(t *testing.T, id string) ledger.Operation {
	t.Helper()
	op, err := f.ledger.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func (f *fixture) toolMessage(t *testing.T, ref string) model.Message {
	t.Helper()
	data, err := f.ledger.GetItem(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	var msg model.Message
	if err := json.Unmarshal(data, &msg); err != nil {
		t.Fatal(err)
	}
	return msg
}

func putFileInput(f *fixture, t *testing.T, opID, content string) contract.ExecuteToolInput {
	return contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", OperationID: opID, ToolCallID: "call_" + opID,
		Tool: githubtools.NamePutFile, Arguments: f.args(t, `{"repo":"acme/app","branch":"main","path":"a.md","content":"`+content+`","message":"m"}`)}
}

// A GitHub rate limit on a mutation means GitHub did nothing: the operation
// is ABSENT, never UNKNOWN, and Temporal retries after the wait GitHub asked
// for — at most maxRetryAfter (10 min), saying so when it cut the wait.
func TestExecuteToolRateLimitedMutationIsAbsentAndRetriedAfterTheWait(t *testing.T) {
	t.Parallel()
	const secondary = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`
	const primary = `{"message":"API rate limit exceeded for installation ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`
	for _, tc := range []struct {
		name      string
		status    int
		header    func(now time.Time) http.Header
		body      string
		wantDelay time.Duration
		wantNote  string
	}{
		{"403 secondary with Retry-After", http.StatusForbidden,
			func(time.Time) http.Header { return http.Header{"Retry-After": {"37"}} },
			secondary, 37 * time.Second, "retrying after 37s, as the service asked"},
		{"429 with x-ratelimit-reset", http.StatusTooManyRequests,
			func(now time.Time) http.Header {
				return http.Header{"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(now.Add(95 * time.Second).Unix())}}
			},
			primary, 95 * time.Second, "retrying after 1m35s, as the service asked"},
		{"403 primary resetting in two hours", http.StatusForbidden,
			func(now time.Time) http.Header {
				return http.Header{"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(now.Add(2 * time.Hour).Unix())}}
			},
			primary, 10 * time.Minute, "the service asked to wait 2h0m0s, longer than capstan waits at once: retrying after 10m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var posts atomic.Int32
			f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
				if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/pulls") {
					return false
				}
				posts.Add(1)
				now := time.Now().UTC().Truncate(time.Second)
				for k, v := range tc.header(now) {
					w.Header()[k] = v
				}
				w.Header().Set("Date", now.Format(http.TimeFormat))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
				return true
			})
			in := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", OperationID: "op-pr", ToolCallID: "call_1",
				Tool: githubtools.NameCreatePullRequest, Arguments: f.args(t, `{"repo":"acme/app","head":"feat","base":"main","title":"t","body":"b"}`)}
			_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
			appErr := appError(t, err)
			if appErr.Type() != contract.ErrTypeOperationNotSent || appErr.NonRetryable() {
				t.Fatalf("err = %v, want a retryable %s", err, contract.ErrTypeOperationNotSent)
			}
			if d := appErr.NextRetryDelay(); d != tc.wantDelay {
				t.Errorf("next retry delay = %s, want %s", d, tc.wantDelay)
			}
			if !strings.Contains(appErr.Error(), tc.wantNote) {
				t.Errorf("err = %q, want it to say %q", appErr.Error(), tc.wantNote)
			}
			if op := f.op(t, "op-pr"); op.State != capstan.OutcomeAbsent || op.AttemptCount != 1 {
				t.Fatalf("ledger = %s after %d attempts, want ABSENT after 1: nothing happened", op.State, op.AttemptCount)
			}

			// The retry may claim it again. go-github still holds the limit
			// GitHub announced and refuses to send — already the read of
			// the head branch the tool records before sending (Prepare) —
			// so nothing is sent, no attempt is counted, and the wait is
			// what is left of the limit.
			_, err = f.env.ExecuteActivity(f.acts.ExecuteTool, in)
			appErr = appError(t, err)
			if appErr.Type() != contract.ErrTypeOperationNotSent || appErr.NextRetryDelay() <= 0 || appErr.NextRetryDelay() > tc.wantDelay {
				t.Errorf("retry: err = %v with delay %s, want %s with at most %s", err, appErr.NextRetryDelay(), contract.ErrTypeOperationNotSent, tc.wantDelay)
			}
			if op := f.op(t, "op-pr"); op.State != capstan.OutcomeAbsent || op.AttemptCount != 1 {
				t.Errorf("ledger after the retry = %s after %d attempts, want ABSENT after still 1", op.State, op.AttemptCount)
			}
			if n, created := posts.Load(), f.sb.GitHub.Stats().PullRequestsCreated; n != 1 || created != 0 {
				t.Errorf("POST /pulls reached GitHub %d times and created %d pull requests; want 1 and 0", n, created)
			}
		})
	}
}

// A put_file whose write landed but whose answer was lost is SUCCEEDED by
// reading it back: recorded once, the model told, the file written once.
func TestExecuteToolPutFileWhoseAnswerWasLostIsReadBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var puts atomic.Int32
	f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodPut || puts.Add(1) > 1 {
			return false
		}
		return landThenDrop(w, r, next)
	})
	in := putFileInput(f, t, "op-put", "hello")
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatalf("err = %v, want SUCCEEDED by reading back", err)
	}
	var res contract.ExecuteToolResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	want := gitBlobSHA("hello")
	if res.State != capstan.OutcomeSucceeded || res.Replayed || res.ExternalID != want {
		t.Errorf("result = %+v, want SUCCEEDED with blob %s", res, want)
	}
	if op := f.op(t, "op-put"); op.State != capstan.OutcomeSucceeded || op.ExternalID != want || op.AttemptCount != 1 {
		t.Errorf("ledger = %s %q after %d attempts, want SUCCEEDED %s after 1", op.State, op.ExternalID, op.AttemptCount, want)
	}
	if msg := f.toolMessage(t, res.Item); msg.ToolCallID != in.ToolCallID || !strings.Contains(msg.Content, `"recovered":true`) || !strings.Contains(msg.Content, want) {
		t.Errorf("tool message = %+v, want it to tell the model the write was recovered", msg)
	}
	if n, written := puts.Load(), f.sb.GitHub.Stats().FilesWritten; n != 1 || written != 1 {
		t.Errorf("%d PUTs, %d files written; want the file written once", n, written)
	}
	// Once SUCCEEDED, the operation replays and sends nothing.
	v, err = f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&res); err != nil || !res.Replayed || puts.Load() != 1 {
		t.Errorf("second run = %+v, %v after %d PUTs; want replayed, nothing sent", res, err, puts.Load())
	}
}

// An ambiguous put_file that did not land is ABSENT — retry is safe — and
// the retry writes it once. Whether the file was missing or held other
// content, only the content of the call counts as landed.
func TestExecuteToolPutFileThatDidNotLandIsAbsent(t *testing.T) {
	t.Parallel()
	for _, existing := range []string{"", "old"} {
		t.Run(fmt.Sprintf("existing %q", existing), func(t *testing.T) {
			f := newFixture(t)
			written := int64(0)
			if existing != "" {
				if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, putFileInput(f, t, "op-old", existing)); err != nil {
					t.Fatal(err)
				}
				written = 1
			}
			var dropped atomic.Bool
			f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
				if r.Method != http.MethodPut || dropped.Swap(true) {
					return false
				}
				return drop(w) // the connection dies before the fake acts
			})
			in := putFileInput(f, t, "op-put", "hello")
			_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
			var appErr *temporal.ApplicationError
			if err == nil || (errors.As(err, &appErr) && appErr.NonRetryable()) || !strings.Contains(err.Error(), "did not take effect") {
				t.Fatalf("err = %v, want a retryable error saying the read-back found nothing", err)
			}
			if op := f.op(t, "op-put"); op.State != capstan.OutcomeAbsent {
				t.Fatalf("ledger = %s, want ABSENT: the retry may claim it", op.State)
			}
			if n := f.sb.GitHub.Stats().FilesWritten; n != written {
				t.Fatalf("files written = %d, want %d", n, written)
			}
			v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
			if err != nil {
				t.Fatal(err)
			}
			var res contract.ExecuteToolResult
			_ = v.Get(&res)
			if op := f.op(t, "op-put"); res.State != capstan.OutcomeSucceeded || op.State != capstan.OutcomeSucceeded || op.AttemptCount != 2 {
				t.Errorf("retry = %+v, ledger %s after %d attempts; want SUCCEEDED after 2", res, op.State, op.AttemptCount)
			}
			if n := f.sb.GitHub.Stats().FilesWritten; n != written+1 {
				t.Errorf("files written = %d, want %d: the retry wrote once", n, written+1)
			}
		})
	}
}

// When the read-back fails too, nobody can tell: UNKNOWN, never ABSENT.
func TestExecuteToolPutFileWhoseReadBackFailsIsUnknown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var putSeen atomic.Bool
	f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		switch {
		case r.Method == http.MethodPut:
			putSeen.Store(true)
			return drop(w)
		case r.Method == http.MethodGet && putSeen.Load():
			w.WriteHeader(http.StatusBadGateway) // the read-back
			return true
		}
		return false
	})
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, putFileInput(f, t, "op-put", "hello"))
	if appErr := appError(t, err); appErr.Type() != contract.ErrTypeOperationUnknown || !appErr.NonRetryable() {
		t.Fatalf("err = %v, want a non-retryable %s", err, contract.ErrTypeOperationUnknown)
	}
	if op := f.op(t, "op-put"); op.State != capstan.OutcomeUnknown || !strings.Contains(op.Error, "could not tell") {
		t.Errorf("ledger = %s (%q), want UNKNOWN saying the read-back could not tell", op.State, op.Error)
	}
}

// A 409 on the retry of a put_file is not a failure until the read-back
// says so. Here GitHub's reads lag behind its writes: the first attempt's
// write lands but its answer is lost, and the read-back still shows the old
// file (ABSENT); the retry reads the old sha too, so GitHub refuses its write
// with 409 — because the first one landed, as the read-back now shows.
// On a first attempt a 409 is a plain refusal, with no read-back.
func TestExecuteToolPutFileConflictIsSettledByReadingBack(t *testing.T) {
	t.Parallel()
	const contentsPath = "/repos/acme/app/contents/a.md?ref=main"
	setup := func(t *testing.T) (*fixture, *httptest.ResponseRecorder) {
		f := newFixture(t)
		if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, putFileInput(f, t, "op-v1", "v1")); err != nil {
			t.Fatal(err)
		}
		stale := httptest.NewRecorder()
		f.sb.GitHub.ServeHTTP(stale, httptest.NewRequest(http.MethodGet, contentsPath, nil))
		if stale.Code != http.StatusOK {
			t.Fatalf("read v1: %d %s", stale.Code, stale.Body)
		}
		return f, stale
	}
	serve := func(w http.ResponseWriter, rec *httptest.ResponseRecorder) bool {
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	}

	t.Run("on a retry, landed", func(t *testing.T) {
		f, stale := setup(t)
		var gets, puts atomic.Int32
		f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			switch r.Method {
			case http.MethodGet:
				if gets.Add(1) <= 3 { // both reads of attempt 1, and the read before attempt 2's write
					return serve(w, stale)
				}
			case http.MethodPut:
				if puts.Add(1) == 1 {
					return landThenDrop(w, r, next)
				}
			}
			return false
		})
		in := putFileInput(f, t, "op-put", "v2")
		_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err == nil || f.op(t, "op-put").State != capstan.OutcomeAbsent {
			t.Fatalf("attempt 1: err = %v, ledger %s; want ABSENT (the lagging read showed v1)", err, f.op(t, "op-put").State)
		}
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err != nil {
			t.Fatalf("attempt 2: err = %v, want SUCCEEDED: the 409 was our own first write", err)
		}
		var res contract.ExecuteToolResult
		_ = v.Get(&res)
		want := gitBlobSHA("v2")
		if op := f.op(t, "op-put"); res.State != capstan.OutcomeSucceeded || op.State != capstan.OutcomeSucceeded || op.ExternalID != want {
			t.Errorf("attempt 2 = %+v, ledger %s %q; want SUCCEEDED with blob %s", res, op.State, op.ExternalID, want)
		}
		if msg := f.toolMessage(t, res.Item); !strings.Contains(msg.Content, `"recovered":true`) {
			t.Errorf("tool message = %s, want it to say the write was recovered", msg.Content)
		}
		if p, written := puts.Load(), f.sb.GitHub.Stats().FilesWritten; p != 2 || written != 2 {
			t.Errorf("%d PUTs, %d files written; want 2 PUTs (one refused with 409) and 2 writes (v1, then v2 once)", p, written)
		}
	})

	t.Run("on a first attempt, a refusal", func(t *testing.T) {
		f, stale := setup(t)
		if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, putFileInput(f, t, "op-v2", "v2")); err != nil {
			t.Fatal(err)
		}
		var gets atomic.Int32
		f.sb.GitHub.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
			if r.Method != http.MethodGet {
				return false
			}
			gets.Add(1)
			return serve(w, stale) // someone wrote v2 after our read of v1
		})
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, putFileInput(f, t, "op-put", "v3"))
		if err != nil {
			t.Fatal(err)
		}
		var res contract.ExecuteToolResult
		_ = v.Get(&res)
		if op := f.op(t, "op-put"); res.State != capstan.OutcomeFailed || op.State != capstan.OutcomeFailed || gets.Load() != 1 {
			t.Errorf("result %s, ledger %s after %d reads; want FAILED after the one read before the write", res.State, op.State, gets.Load())
		}
		if msg := f.toolMessage(t, res.Item); !strings.Contains(msg.Content, "changed since it was read") {
			t.Errorf("tool message = %s, want it to say the file changed", msg.Content)
		}
	})
}

// Slack's ratelimited answer travels the same path as GitHub's: ABSENT, and
// a retry after the wait Slack named.
func TestDeliverRateLimitedIsRetriedAfterTheWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.sb.Slack.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	})
	_, err := f.env.ExecuteActivity(f.acts.Deliver, contract.DeliverInput{OperationID: "op-d", Channel: "#c", Text: "x"})
	appErr := appError(t, err)
	if appErr.Type() != contract.ErrTypeDeliveryNotSent || appErr.NonRetryable() || appErr.NextRetryDelay() != 7*time.Second {
		t.Fatalf("err = %v (delay %s), want a retryable %s after 7s", err, appErr.NextRetryDelay(), contract.ErrTypeDeliveryNotSent)
	}
	if op := f.op(t, "op-d"); op.State != capstan.OutcomeAbsent {
		t.Errorf("ledger = %s, want ABSENT", op.State)
	}
	if msgs := f.sb.Slack.Messages("#c"); len(msgs) != 0 {
		t.Errorf("messages = %+v, want none", msgs)
	}
}
