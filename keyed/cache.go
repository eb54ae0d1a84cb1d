package keyed

import (
	"container/list"
	"sync"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// replayCache keeps this process's recently final operations, so that a
// replay needs no round trip to the store. It is safe because a final
// operation never changes again: only its purge removes it, and an entry
// is dropped when the operation's retention ends. Bounded in bytes.
type replayCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	lru   *list.List // front: most recent
	items map[cacheKey]*list.Element
}

type cacheKey = ledger.OpKey

type cacheEntry struct {
	key  cacheKey
	op   *ledger.Operation
	size int64
}

func newReplayCache(maxBytes int64) *replayCache {
	return &replayCache{max: maxBytes, lru: list.New(), items: map[cacheKey]*list.Element{}}
}

// get returns the final operation under k, if held and not yet
// past its retention.
func (c *replayCache) get(k ledger.OpKey) *ledger.Operation {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return nil
	}
	e := el.Value.(*cacheEntry)
	if !time.Now().Before(e.op.ExpiresAt) {
		c.remove(el)
		return nil
	}
	c.lru.MoveToFront(el)
	return e.op
}

// put remembers a final operation.
func (c *replayCache) put(op *ledger.Operation) {
	if c == nil || op == nil || !op.State.Final() || !time.Now().Before(op.ExpiresAt) {
		return
	}
	size := int64(256 + len(op.ID) + len(op.Key) + len(op.Fingerprint))
	if op.Response != nil {
		size += int64(len(op.Response.Body))
		for k, v := range op.Response.Header {
			for _, s := range v {
				size += int64(len(k) + len(s))
			}
		}
	}
	if size > c.max/8 { // one entry never crowds out the rest
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := ledger.OpKey{Tenant: op.Tenant, Namespace: op.Namespace, Key: op.Key}
	if el, ok := c.items[k]; ok {
		c.remove(el)
	}
	c.items[k] = c.lru.PushFront(&cacheEntry{key: k, op: op, size: size})
	c.size += size
	for c.size > c.max {
		c.remove(c.lru.Back())
	}
}

func (c *replayCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.items, e.key)
	c.size -= e.size
}
