package redact

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// Handler is next with the secrets masked in every record's message and
// attributes (those bound with With too), whatever their kind: an error or
// any other value is masked in the text next would write for it. A nil r
// returns next.
func (r *Redactor) Handler(next slog.Handler) slog.Handler {
	if r == nil {
		return next
	}
	return &handler{next: next, r: r}
}

type handler struct {
	next slog.Handler
	r    *Redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.r.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.r.attr(a)
	}
	return &handler{next: h.next.WithAttrs(red), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), r: h.r}
}

// attr is a with its secrets masked.
func (r *Redactor) attr(a slog.Attr) slog.Attr {
	a.Key = r.String(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, ga := range g {
			red[i] = r.attr(ga)
		}
		a.Value = slog.GroupValue(red...)
	case slog.KindAny:
		if text, ok := r.anyText(v.Any()); ok {
			a.Value = slog.StringValue(text)
		} else {
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}

// anyText is the text a handler would write for x with the secrets masked,
// and true, when that text holds a secret; x is kept otherwise.
func (r *Redactor) anyText(x any) (string, bool) {
	var texts []string
	switch x := x.(type) {
	case nil:
		return "", false
	case error:
		texts = append(texts, x.Error())
	case fmt.Stringer:
		texts = append(texts, x.String())
	}
	// The JSON handler marshals a value; the text handler formats it.
	if b, err := json.Marshal(x); err == nil {
		texts = append(texts, string(b))
	}
	texts = append(texts, fmt.Sprintf("%+v", x))
	for _, t := range texts {
		if red := r.String(t); red != t {
			return red, true
		}
	}
	return "", false
}
