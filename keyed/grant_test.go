package keyed_test

import (
	"context"
	"testing"

	"github.com/idemgate/idemgate/internal/dbtest"
)

// TestGrantKnowsItsHistory: a lease granted by the reservation that
// created its operation comes with the operation's history, as the store
// recorded it, so that the grant's answer needs no read: on each store,
// the event given is the event read back, field for field.
func TestGrantKnowsItsHistory(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		x := executor(t, s)
		res, err := x.Execute(context.Background(), command("granted"), nil)
		if err != nil || res.Lease == nil || !res.Created {
			t.Fatalf("grant: %+v %v", res, err)
		}
		stored, err := s.History(context.Background(), res.Op.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.History) != 1 || len(stored) != 1 {
			t.Fatalf("history given %+v, stored %+v", res.History, stored)
		}
		g, h := res.History[0], stored[0]
		if g.OpID != h.OpID || g.From != h.From || g.To != h.To || !g.At.Equal(h.At) || g.Actor != h.Actor ||
			g.Reason != h.Reason {
			t.Fatalf("history given %+v, stored %+v", g, h)
		}
		// A second command under the key is answered as it stands: no
		// lease, so no history to give.
		again, err := x.Execute(context.Background(), command("granted"), nil)
		if err != nil || again.History != nil {
			t.Fatalf("the same key again: %+v %v", again, err)
		}
	})
}
