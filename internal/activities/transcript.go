package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
)

// A manifest names a task's committed transcript, in order, with one
// reference: it is itself a content-addressed item. A turn that only adds
// items to the transcript writes a link: the items it adds and Base, the
// reference of an earlier manifest that names everything before them, so the
// bytes a task stores grow linearly in its turns rather than quadratically
// (docs/design.md §3.2). To keep the walk back short, a link holds up to
// segmentItems items: while its predecessor's own items and the turn's new
// ones fit, the new manifest repeats them beside the same base, and only when
// they no longer fit does the predecessor become the base. Loading reads one
// manifest per segmentItems items, against the one read per item it does
// anyway; each link stores at most segmentItems references plus one turn's.
//
// A manifest without Base names the whole transcript itself: the first
// turn's, a compaction's (which replaces items mid-transcript, and starts a
// fresh chain), and every manifest written before links existed, which still
// load and are extended like any other.
//
// Stored, a whole list is {"items": [refs]}, byte for byte what every
// manifest was before links; a link is {"items": {"base": ref, "count": n,
// "refs": [refs]}}, so a worker from before links, which decodes "items" as a
// list, fails on a link (an attempt that failed, for the turn guard) instead
// of taking the link's few items for the whole transcript.
type manifest struct {
	// Base is the reference of the manifest naming the items before Items;
	// empty when Items are the whole transcript.
	Base string
	// Count is the number of items of the whole transcript, Base's
	// included: a check on the walk.
	Count int
	// Items are the manifest's own item references, after Base's.
	Items []string
}

// manifestLink is a link as stored, under "items".
type manifestLink struct {
	Base  string   `json:"base"`
	Count int      `json:"count"`
	Refs  []string `json:"refs"`
}

// MarshalJSON stores m as a whole list or a link (see manifest).
func (m manifest) MarshalJSON() ([]byte, error) {
	if m.Base == "" {
		return json.Marshal(struct {
			Items []string `json:"items"`
		}{m.Items})
	}
	return json.Marshal(struct {
		Items manifestLink `json:"items"`
	}{manifestLink{Base: m.Base, Count: m.Count, Refs: m.Items}})
}

// UnmarshalJSON reads a whole list or a link (see manifest).
func (m *manifest) UnmarshalJSON(data []byte) error {
	var stored struct {
		Items json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &stored); err != nil {
		return err
	}
	if v := bytes.TrimSpace(stored.Items); len(v) > 0 && v[0] == '{' {
		var l manifestLink
		if err := json.Unmarshal(v, &l); err != nil {
			return err
		}
		if l.Base == "" {
			return fmt.Errorf("a link without a base: %w", errBrokenManifest)
		}
		*m = manifest{Base: l.Base, Count: l.Count, Items: l.Refs}
		return nil
	}
	var items []string
	if err := json.Unmarshal(stored.Items, &items); err != nil {
		return err
	}
	*m = manifest{Count: len(items), Items: items}
	return nil
}

// segmentItems bounds the items a link holds (see manifest). Measured with
// BenchmarkTranscript1000Turns (docs/design.md §3.2): with 16, a 1,000-turn
// task's manifests take 0.78 MB (a link a turn: 0.26 MB; whole lists: 74 MB)
// and loading its transcript reads 126 manifests beside its 2,001 items (a
// link a turn: 1,000).
const segmentItems = 16

// transcript is a loaded transcript: the manifest it was loaded from and
// the references of its items, the committed ones then those the turn
// adds (its seed and appended tool messages).
type transcript struct {
	ref       string   // the manifest's reference; empty before the first turn
	head      manifest // the manifest, decoded
	refs      []string // every item's reference, in order
	committed int      // how many of refs the manifest names
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

// getMessages reads the transcript items refs name, in one ledger call.
func (a *Activities) getMessages(ctx context.Context, refs []string) ([]model.Message, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	items, err := a.Ledger.GetItems(ctx, refs)
	if err != nil {
		return nil, fmt.Errorf("load %d transcript items: %w", len(refs), err)
	}
	msgs := make([]model.Message, len(items))
	for i, data := range items {
		if err := json.Unmarshal(data, &msgs[i]); err != nil {
			return nil, fmt.Errorf("decode transcript item %s: %w", refs[i], err)
		}
	}
	return msgs, nil
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

// snapshot holds a manifest naming refs, the whole transcript, by
// themselves, and returns its reference: the start of a fresh chain, for a
// transcript that is not its predecessor plus items (a compaction's).
func (p *pendingItems) snapshot(refs []string) (string, error) {
	return p.manifest(manifest{Items: refs})
}

// extend holds the manifest of t's transcript followed by added, and
// returns its reference: a link to t's manifest, or, while the items fit
// in one link, a manifest beside t's on the same base (see manifest).
func (p *pendingItems) extend(t transcript, added []string) (string, error) {
	m := manifest{Base: t.ref, Count: t.committed + len(added), Items: added}
	if len(t.head.Items)+len(added) <= segmentItems {
		m.Base, m.Items = t.head.Base, slices.Concat(t.head.Items, added)
	}
	return p.manifest(m)
}

func (p *pendingItems) manifest(m manifest) (string, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode transcript manifest: %w", err)
	}
	return p.add(data), nil
}

// manifestRefs reads the manifest ref and those it builds on, and returns
// it and the references of every item of the transcript it names, in
// order. Each manifest's Count must be its base's plus its own items, so a
// broken chain is an error, never a wrong transcript. (A chain cannot loop:
// a manifest's reference is the hash of bytes that hold its base's.)
func (a *Activities) manifestRefs(ctx context.Context, ref string) (manifest, []string, error) {
	var head manifest
	var parts [][]string
	want := -1 // the items the next manifest must name; unknown for the head
	for next := ref; next != ""; {
		data, err := a.Ledger.GetItem(ctx, next)
		if err != nil {
			return head, nil, fmt.Errorf("load transcript manifest %s: %w", next, err)
		}
		var m manifest
		if err := json.Unmarshal(data, &m); err != nil {
			return head, nil, fmt.Errorf("decode transcript manifest %s: %w", next, err)
		}
		total := m.Count
		if total < len(m.Items) || want >= 0 && total != want {
			return head, nil, fmt.Errorf("transcript manifest %s: names %d items, holds %d, and %d were expected: %w",
				next, total, len(m.Items), want, errBrokenManifest)
		}
		if next == ref {
			head = m
		}
		parts = append(parts, m.Items)
		want, next = total-len(m.Items), m.Base
	}
	if want > 0 {
		return head, nil, fmt.Errorf("transcript manifest %s: its chain ends %d items short: %w", ref, want, errBrokenManifest)
	}
	refs := make([]string, 0, max(head.Count, len(head.Items)))
	for i := len(parts) - 1; i >= 0; i-- {
		refs = append(refs, parts[i]...)
	}
	return head, refs, nil
}

// errBrokenManifest: a manifest's chain does not add up to the transcript
// it says it names.
var errBrokenManifest = errors.New("transcript manifest chain is broken")

// loadTranscript resolves a manifest plus appended items and seed messages
// into the transcript the next attempt sees and its messages. The seed
// messages are not stored here but held in pending, to be stored with the
// turn's commit: until then nothing refers to them.
func (a *Activities) loadTranscript(ctx context.Context, in contract.ModelTurnInput, pending *pendingItems) (transcript, []model.Message, error) {
	t := transcript{ref: in.Transcript}
	if in.Transcript != "" {
		var err error
		if t.head, t.refs, err = a.manifestRefs(ctx, in.Transcript); err != nil {
			return t, nil, err
		}
	}
	t.committed = len(t.refs)
	stored, err := a.getMessages(ctx, append(slices.Clip(t.refs), in.Append...))
	if err != nil {
		return t, nil, err
	}
	msgs := make([]model.Message, 0, len(t.refs)+len(in.Seed)+len(in.Append))
	msgs = append(msgs, stored[:t.committed]...)
	for _, msg := range in.Seed {
		data, err := json.Marshal(msg)
		if err != nil {
			return t, nil, fmt.Errorf("encode transcript item: %w", err)
		}
		// The model sees the message as a later turn will read it back.
		var m model.Message
		if err := json.Unmarshal(data, &m); err != nil {
			return t, nil, fmt.Errorf("decode transcript item: %w", err)
		}
		t.refs = append(t.refs, pending.add(data))
		msgs = append(msgs, m)
	}
	t.refs = append(t.refs, in.Append...)
	msgs = append(msgs, stored[t.committed:]...)
	return t, msgs, nil
}
