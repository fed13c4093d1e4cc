package slackpost

import (
	"strings"

	"github.com/slack-go/slack"
)

// Slack parses a message's text: "<…>" is a link, a mention or a special
// command (<!channel> pings everyone, <http://evil|click> shows "click"
// over any address), "&…;" an entity, and, with mrkdwn on, *, _, ~ and
// backticks format it. capstan's messages carry text it did not write — a
// model's answer, a call's arguments, a file's content — so that text
// reaches Slack escaped for where it goes (issue 32, item 11).

// escaper writes the three characters Slack's text format reserves as
// the entities Slack documents for them; & first, so nothing is escaped
// twice.
var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Escape is text with &, < and > written as &amp;, &lt; and &gt;: Slack
// shows it as it is, and no part of it can be a link, a mention or
// <!channel>.
func Escape(text string) string { return escaper.Replace(text) }

// TextOptions are the chat.postMessage options that carry text: always
// escaped (Escape); with plain, posted with mrkdwn off, so Slack shows
// every character as written and applies no formatting — no code block a
// file's content could close, no bold or strike-through it could fake.
// A final answer is mrkdwn (the model's formatting shows); an approval
// notice, which quotes a call's arguments, is plain.
func TextOptions(text string, plain bool) []slack.MsgOption {
	opts := []slack.MsgOption{slack.MsgOptionText(Escape(text), false)}
	if plain {
		opts = append(opts, slack.MsgOptionDisableMarkdown())
	}
	return opts
}
