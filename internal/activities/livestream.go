package activities

import (
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// LiveStream receives an attempt's text as the model sends it, for the
// people who follow the task (`starter follow`, docs/design.md §9.3).
// Heartbeats are too slow for that; the worker's livestream.Hub serves the
// text over HTTP instead, and the URL Begin returns, put in the attempt's
// heartbeat details, tells a follower where. The text is speculative: whether the attempt
// committed is the workflow's to say. *livestream.Hub satisfies it.
type LiveStream interface {
	// Begin starts the attempt's stream and returns where followers read it.
	Begin(attemptID string) (url string)
	Publish(attemptID, text string)
	End(attemptID, outcome string)
}

// beginLive starts the attempt's live stream and returns its URL; empty
// without a live stream.
func (a *Activities) beginLive(attemptID string) string {
	if a.Live == nil {
		return ""
	}
	return a.Live.Begin(attemptID)
}

// publishLive passes a text delta to the live stream, if there is one.
func (a *Activities) publishLive(attemptID string, ev model.Event) {
	if a.Live != nil && ev.Kind == model.EventTextDelta {
		a.Live.Publish(attemptID, ev.Text)
	}
}

// endLive closes the attempt's live stream with how the attempt ended here.
func (a *Activities) endLive(attemptID string, err error) {
	if a.Live == nil {
		return
	}
	outcome := model.OutcomeCompleted
	if err != nil {
		outcome = model.OutcomeUnknown
		if r, ok := contract.AttemptReportOf(err); ok {
			outcome = r.Outcome
		}
	}
	a.Live.End(attemptID, string(outcome))
}
