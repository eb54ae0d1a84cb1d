package ledger

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/audit"
)

// EventBatcher writes the events that record no transition (a replay, a
// conflict) in batches, within Window of their recording (DESIGN.md allows
// them to be batched), so that a replay's path stays a read: Record only
// queues. A batch the store refuses for a while is retried, never dropped
// while the batcher runs; Close writes what is queued.
type EventBatcher struct {
	store  Store
	window time.Duration
	log    *slog.Logger
	queue  chan audit.Event
	done   chan struct{}
	once   sync.Once
}

// batchEvents bounds one write: a batch of this many is written at once.
const batchEvents = 256

// NewEventBatcher starts a batcher writing to s every window (100 ms when
// 0). Failures are logged on log.
func NewEventBatcher(s Store, window time.Duration, log *slog.Logger) *EventBatcher {
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
	b.queue <- e
}

// Close writes what is queued and stops; Record must not be called after.
func (b *EventBatcher) Close() {
	b.once.Do(func() { close(b.queue) })
	<-b.done
}

func (b *EventBatcher) loop() {
	defer close(b.done)
	tick := time.NewTicker(b.window)
	defer tick.Stop()
	batch := make([]audit.Event, 0, batchEvents)
	for {
		select {
		case e, ok := <-b.queue:
			if !ok {
				b.write(batch, true)
				return
			}
			if batch = append(batch, e); len(batch) == batchEvents {
				batch = b.write(batch, false)
			}
		case <-tick.C:
			batch = b.write(batch, false)
		}
	}
}

// write writes batch, trying again while the store is unavailable (for
// good when closing, after a last few attempts), and returns it emptied.
func (b *EventBatcher) write(batch []audit.Event, closing bool) []audit.Event {
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
	return batch[:0]
}
