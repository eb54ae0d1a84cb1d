package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/audit"
)

// EventWriter is where an EventBatcher writes: a store's RecordEvents. A
// Store is one.
type EventWriter interface {
	RecordEvents(ctx context.Context, events []audit.Event) error
}

var _ EventWriter = Store(nil)

// EventBatcher writes the events that record no transition (a replay, a
// conflict) in batches, within Window of their recording (docs/design.md allows
// them to be batched), so that a replay's path stays a read: Record only
// queues. Within a batch, the same event repeated (one run retrying one
// key with one request, answered alike) is written once, its reason
// saying how many requests it stands for and when the last came: a retry
// storm costs the store a row per window, not per request, and the log
// still says who sent what, and how often. A batch the store refuses for
// a while is retried, never dropped while the batcher runs; Close writes
// what is queued.
type EventBatcher struct {
	store  EventWriter
	window time.Duration
	log    *slog.Logger
	queue  chan audit.Event
	done   chan struct{}
	// mu guards closed: Record holds it shared while it queues, Close
	// exclusively while it closes the queue, so that a late Record finds
	// the batcher closed instead of sending on a closed channel.
	mu     sync.RWMutex
	closed bool
}

// batchEvents bounds one write: a batch of this many is written at once.
const batchEvents = 256

// NewEventBatcher starts a batcher writing to s every window (100 ms when
// 0). Failures are logged on log.
func NewEventBatcher(s EventWriter, window time.Duration, log *slog.Logger) *EventBatcher {
	if window <= 0 {
		window = 100 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &EventBatcher{store: s, window: window, log: log, queue: make(chan audit.Event, 16*batchEvents),
		done: make(chan struct{})}
	go b.loop()
	return b
}

// Record queues e. It blocks only when the store is far behind: a full
// queue slows requests rather than lose their events.
func (b *EventBatcher) Record(e audit.Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if err := ValidateEvents([]audit.Event{e}); err != nil { // a caller's bug: never a batch's loss
		b.log.Error("audit event refused", slog.String("kind", string(e.Kind)), slog.String("error", err.Error()))
		return
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		// A shutdown out of order: say so, never crash the process.
		b.log.Error("audit event after the batcher closed: not recorded", slog.String("kind", string(e.Kind)),
			slog.String("operation_id", e.OperationID))
		return
	}
	b.queue <- e
}

// Close writes what is queued and stops. A Record after it is logged and
// dropped; stop what records (the requests, the reconciler) first.
func (b *EventBatcher) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.mu.Unlock()
	<-b.done
}

func (b *EventBatcher) loop() {
	defer close(b.done)
	tick := time.NewTicker(b.window)
	defer tick.Stop()
	batch := newCoalesced()
	for {
		select {
		case e, ok := <-b.queue:
			if !ok {
				b.write(batch.events(), true)
				return
			}
			if batch.add(e) == batchEvents {
				b.write(batch.events(), false)
				batch = newCoalesced()
			}
		case <-tick.C:
			b.write(batch.events(), false)
			batch = newCoalesced()
		}
	}
}

// coalesced is a batch in which an event repeated is kept once, with how
// many requests it stands for and when the last came.
type coalesced struct {
	order []audit.Event
	index map[audit.Event]int // the event, its time cleared → its place
	count []int
	last  []time.Time
}

func newCoalesced() *coalesced { return &coalesced{index: map[audit.Event]int{}} }

// add adds e and returns how many distinct events the batch holds.
func (c *coalesced) add(e audit.Event) int {
	id := e
	id.At = time.Time{}
	if i, ok := c.index[id]; ok {
		c.count[i]++
		c.last[i] = e.At
		return len(c.order)
	}
	c.index[id] = len(c.order)
	c.order, c.count, c.last = append(c.order, e), append(c.count, 1), append(c.last, e.At)
	return len(c.order)
}

// events is the batch to write: each repeated event's reason says how
// many requests it stands for.
func (c *coalesced) events() []audit.Event {
	for i, n := range c.count {
		if n > 1 {
			e := &c.order[i]
			note := fmt.Sprintf("%d requests, the last at %s", n, c.last[i].UTC().Format("2006-01-02T15:04:05.000000Z"))
			if e.Reason != "" {
				note = e.Reason + "; " + note
			}
			e.Reason = note
		}
	}
	return c.order
}

// write writes batch, trying again while the store is unavailable (for
// good when closing, after a last few attempts), and returns it emptied.
func (b *EventBatcher) write(batch []audit.Event, closing bool) {
	for attempt, wait := 0, b.window; len(batch) > 0; attempt, wait = attempt+1, min(2*wait, 5*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := b.store.RecordEvents(ctx, batch)
		cancel()
		if err == nil {
			break
		}
		b.log.Error("record audit events", slog.Int("events", len(batch)), slog.String("error", err.Error()))
		if closing && attempt >= 3 {
			b.log.Error("audit events lost", slog.Int("events", len(batch)))
			break
		}
		time.Sleep(wait)
	}
}
