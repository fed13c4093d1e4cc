package activities

import (
	"bytes"
	"container/list"
	"context"
	"sync"

	"github.com/capstanhq/capstan/internal/ledger"
)

// itemCache keeps the transcript items this worker stored or read, by
// reference, so that the next turn or tool call of a task on this worker
// reads its manifest, its messages and its arguments from memory instead
// of the ledger. A reference is the hash of the item's bytes
// (ledger.ItemRef), and an item is never changed under it, so a cached
// item is exactly what the ledger holds: a hit answers as the ledger
// would. An item enters only once the ledger has stored it — the write
// that holds it returned success, so it is durable — or returned it; a
// write that failed or was refused adds nothing. Each answer is a copy: a
// caller cannot change what the next one reads. The least recently used
// items leave first, past limit bytes (CAPSTAN_ITEM_CACHE_BYTES); an item
// larger than an eighth of the limit is never kept, and a limit of 0 or
// less keeps nothing. What the cache holds is plain text in the worker's
// memory, as every item is while an activity uses it; the ledger's rows
// stay sealed (CAPSTAN_CODEC_KEYS).
type itemCache struct {
	Ledger

	limit int // bytes

	mu    sync.Mutex
	size  int
	order *list.List               // of *cachedItem, most recently used first
	items map[string]*list.Element // by reference
}

type cachedItem struct {
	ref  string
	data []byte
}

func newItemCache(l Ledger, limit int) *itemCache {
	return &itemCache{Ledger: l, limit: limit, order: list.New(), items: map[string]*list.Element{}}
}

// get is the item cached under ref, as a copy.
func (c *itemCache) get(ref string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[ref]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return bytes.Clone(e.Value.(*cachedItem).data), true
}

// add keeps a copy of data, the bytes the ledger holds under ref.
func (c *itemCache) add(ref string, data []byte) {
	if data == nil {
		data = []byte{}
	}
	if c.limit <= 0 || len(data) > c.limit/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[ref]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.items[ref] = c.order.PushFront(&cachedItem{ref: ref, data: bytes.Clone(data)})
	c.size += len(data)
	for c.size > c.limit {
		last := c.order.Back()
		it := last.Value.(*cachedItem)
		c.order.Remove(last)
		delete(c.items, it.ref)
		c.size -= len(it.data)
	}
}

// addStored keeps items a write stored, under their references.
func (c *itemCache) addStored(items [][]byte) {
	for _, data := range items {
		c.add(ledger.ItemRef(data), data)
	}
}

func (c *itemCache) PutItem(ctx context.Context, data []byte) (string, error) {
	ref, err := c.Ledger.PutItem(ctx, data)
	if err == nil {
		c.add(ref, data)
	}
	return ref, err
}

func (c *itemCache) GetItem(ctx context.Context, ref string) ([]byte, error) {
	if data, ok := c.get(ref); ok {
		return data, nil
	}
	data, err := c.Ledger.GetItem(ctx, ref)
	if err == nil {
		c.add(ref, data)
	}
	return data, err
}

// GetItems reads from the ledger, in one call, only the items it does not
// hold.
func (c *itemCache) GetItems(ctx context.Context, refs []string) ([][]byte, error) {
	out := make([][]byte, len(refs))
	var missing []string
	at := map[string][]int{} // where each missing reference goes in out
	for i, ref := range refs {
		if data, ok := c.get(ref); ok {
			out[i] = data
			continue
		}
		if _, seen := at[ref]; !seen {
			missing = append(missing, ref)
		}
		at[ref] = append(at[ref], i)
	}
	if len(missing) == 0 {
		return out, nil
	}
	got, err := c.Ledger.GetItems(ctx, missing)
	if err != nil {
		return nil, err
	}
	for j, ref := range missing {
		c.add(ref, got[j])
		for n, i := range at[ref] {
			if n == 0 {
				out[i] = got[j]
			} else {
				out[i] = bytes.Clone(got[j])
			}
		}
	}
	return out, nil
}

func (c *itemCache) CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) ([]byte, error) {
	stored, err := c.Ledger.CommitTurn(ctx, turnID, output, items...)
	if err == nil {
		c.addStored(items)
	}
	return stored, err
}

func (c *itemCache) Complete(ctx context.Context, comp ledger.Completion) error {
	err := c.Ledger.Complete(ctx, comp)
	if err == nil {
		c.addStored(comp.Items)
	}
	return err
}
