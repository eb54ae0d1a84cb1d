// Package outbox is the transactional outbox for Go services (docs/design.md,
// "Multi-effect operations and the outbox"). A service that changes its
// own database and must then call an external API cannot make both one
// transaction; so it writes the call, an effect, in its business
// transaction (Enqueue, on the store bound to that transaction), and a
// Relay, in the same process or another (`idemgate relay`), delivers it.
//
// Each effect carries its derived key, <operation key>/<effect name>, on
// every delivery. Deliveries are leased and fenced like an operation's
// owner, classified by error family like a gateway's attempt, and unknown
// when a request was sent and no answer came. Delivery is AT LEAST ONCE:
// an unknown delivery, or one whose relay died after sending it, is sent
// again with the same key, so a target must deduplicate by that key (one
// that does shows one effect however often it is delivered). Two relays
// never deliver one effect at the same moment, and the effects of one
// operation go out in the order they were enqueued, each once every
// earlier one succeeded: a resume continues at the first effect that is
// not final, and never runs a succeeded one again.
package outbox

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/ledger"
)

// Effect is an effect to enqueue: its operation's key and its own name
// (which derive its key), the relay target that delivers it, and the
// request. Credentials belong in the target's headers, in the relay's
// configuration, never in an effect: effects are stored.
type Effect = ledger.EffectParams

// Enqueuer is where Enqueue writes: a store, or one bound to a caller's
// transaction (ledger.Steps is one).
type Enqueuer interface {
	Enqueue(ctx context.Context, effects []ledger.EffectParams) ([]*ledger.Effect, error)
}

var _ Enqueuer = ledger.Steps(nil)

// Enqueue writes effects in tx: the store bound to the caller's business
// transaction (sqlite.Store.Tx, postgres.Store.Tx), where they commit with
// its writes or roll back with them; or a store itself, where they are
// written together, or none. An effect already enqueued under its key
// with the same content is returned as it stands (a business transaction
// repeated after its commit's reply was lost); with other content it is
// ledger.ErrFingerprintMismatch. After an error in a caller's transaction,
// roll it back.
func Enqueue(ctx context.Context, tx Enqueuer, effects ...Effect) ([]*ledger.Effect, error) {
	out, err := tx.Enqueue(ctx, effects)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	return out, nil
}
