package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/internal/model"
)

// manifest lists the committed transcript items of a task, in order. It is
// itself stored as a content-addressed item, so a turn's input names the
// whole transcript with one reference.
type manifest struct {
	Items []string `json:"items"`
}

// putMessage stores one transcript item and returns its reference.
func (a *Activities) putMessage(ctx context.Context, m model.Message) (string, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode transcript item: %w", err)
	}
	ref, err := a.Ledger.PutItem(ctx, data)
	if err != nil {
		return "", fmt.Errorf("store transcript item: %w", err)
	}
	return ref, nil
}

func (a *Activities) getMessage(ctx context.Context, ref string) (model.Message, error) {
	var m model.Message
	data, err := a.Ledger.GetItem(ctx, ref)
	if err != nil {
		return m, fmt.Errorf("load transcript item %s: %w", ref, err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("decode transcript item %s: %w", ref, err)
	}
	return m, nil
}

// loadTranscript resolves a manifest plus appended items and seed messages
// into the refs and messages of the transcript the next attempt sees.
func (a *Activities) loadTranscript(ctx context.Context, in ModelTurnInput) ([]string, []model.Message, error) {
	var refs []string
	if in.Transcript != "" {
		data, err := a.Ledger.GetItem(ctx, in.Transcript)
		if err != nil {
			return nil, nil, fmt.Errorf("load transcript manifest %s: %w", in.Transcript, err)
		}
		var m manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, nil, fmt.Errorf("decode transcript manifest %s: %w", in.Transcript, err)
		}
		refs = m.Items
	}
	for _, msg := range in.Seed {
		ref, err := a.putMessage(ctx, msg)
		if err != nil {
			return nil, nil, err
		}
		refs = append(refs, ref)
	}
	refs = append(refs, in.Append...)
	msgs := make([]model.Message, 0, len(refs))
	for _, ref := range refs {
		m, err := a.getMessage(ctx, ref)
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, m)
	}
	return refs, msgs, nil
}

func (a *Activities) saveManifest(ctx context.Context, refs []string) (string, error) {
	data, err := json.Marshal(manifest{Items: refs})
	if err != nil {
		return "", fmt.Errorf("encode transcript manifest: %w", err)
	}
	ref, err := a.Ledger.PutItem(ctx, data)
	if err != nil {
		return "", fmt.Errorf("store transcript manifest: %w", err)
	}
	return ref, nil
}
