package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
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

// pendingItems are the transcript items an activity commits, held until the
// one ledger write that commits them (CommitTurn, or Complete for a tool's
// message) instead of one PutItem each: an item's reference is the hash of
// its bytes (ledger.ItemRef), so it is known before the item is stored, and
// nothing can refer to it before the commit that stores it is durable.
type pendingItems struct {
	data [][]byte
}

// add holds data and returns its reference.
func (p *pendingItems) add(data []byte) string {
	if data == nil {
		data = []byte{}
	}
	p.data = append(p.data, data)
	return ledger.ItemRef(data)
}

// message holds a transcript message and returns its reference.
func (p *pendingItems) message(m model.Message) (string, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode transcript item: %w", err)
	}
	return p.add(data), nil
}

// manifest holds the manifest of refs and returns its reference.
func (p *pendingItems) manifest(refs []string) (string, error) {
	data, err := json.Marshal(manifest{Items: refs})
	if err != nil {
		return "", fmt.Errorf("encode transcript manifest: %w", err)
	}
	return p.add(data), nil
}

// loadTranscript resolves a manifest plus appended items and seed messages
// into the refs and messages of the transcript the next attempt sees. The
// seed messages are not stored here but held in pending, to be stored with
// the turn's commit: until then nothing refers to them.
func (a *Activities) loadTranscript(ctx context.Context, in contract.ModelTurnInput, pending *pendingItems) ([]string, []model.Message, error) {
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
	msgs := make([]model.Message, 0, len(refs)+len(in.Seed)+len(in.Append))
	for _, ref := range refs {
		m, err := a.getMessage(ctx, ref)
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, m)
	}
	for _, msg := range in.Seed {
		data, err := json.Marshal(msg)
		if err != nil {
			return nil, nil, fmt.Errorf("encode transcript item: %w", err)
		}
		// The model sees the message as a later turn will read it back.
		var m model.Message
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, nil, fmt.Errorf("decode transcript item: %w", err)
		}
		refs = append(refs, pending.add(data))
		msgs = append(msgs, m)
	}
	for _, ref := range in.Append {
		m, err := a.getMessage(ctx, ref)
		if err != nil {
			return nil, nil, err
		}
		refs = append(refs, ref)
		msgs = append(msgs, m)
	}
	return refs, msgs, nil
}
