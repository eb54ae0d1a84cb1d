package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// The lapse drills (issue 24, item 7.10): the store goes away while the
// upstream works on a write, and stays away for longer than the route's
// lease (1s) and shorter than the recording deadline (30s). The gateway's
// lease sweep runs every 100ms and makes the operation unknown as soon as
// the store is back; the owner, still holding the upstream's answer and
// retrying its completion, must settle it all the same. The answer the
// client saw is what every retry gets, and the API made one effect.

// answeredThroughALapse sends one write, takes the store down once the API
// is working on it, brings it back 3s later, and judges the outcome.
func (d *drill) answeredThroughALapse(down, up func()) {
	d.t.Helper()
	before := d.effects()["tickets_created"]
	d.fault(`{"delay_ms": 1500}`)
	body := ticket("", "answered while the store is away")
	answer := make(chan reply, 1)
	go func() { answer <- d.keyed("/v1/tickets", "lapse", body) }()
	d.waitInFlight(1)
	down()
	time.Sleep(3 * time.Second)
	up()
	first := <-answer
	want(d.t, first, 201, "")
	d.fault(`{"delay_ms": 0}`)
	again := d.keyed("/v1/tickets", "lapse", body)
	if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		d.t.Fatalf("answered 201 %s, then the retry got %d %s", first.body, again.status, again.body)
	}
	var op contract.View
	r := d.control("GET", "/operations?key=lapse", "")
	if err := json.Unmarshal([]byte(r.body), &op); err != nil || op.State != ledger.Succeeded {
		d.t.Fatalf("the operation: %d %s", r.status, r.body)
	}
	d.wantEffects("tickets_created", before+1)
	for _, h := range op.History {
		d.t.Logf("%s by %s: %s", h.To, h.Actor, h.Reason) // the sweep usually wins the race, then the owner settles
	}
}

// TestDrillPostgresDownLongerThanTheLease: a private PostgreSQL crashed
// (pg_ctl stop -m immediate) and restarted 3s later.
func TestDrillPostgresDownLongerThanTheLease(t *testing.T) {
	t.Parallel()
	pg := testenv.PrivatePostgres(t)
	d := newDrill(t, setup{storeDSN: pg.DSN})
	d.answeredThroughALapse(pg.Crash, pg.Start)
}

// TestDrillStoreUnwritableLongerThanTheLease: the gateway's SQLite file
// made unwritable (chattr +i) for 3s.
func TestDrillStoreUnwritableLongerThanTheLease(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	want(t, d.keyed("/v1/tickets", "before", ticket("", "before")), 201, "")
	var undo func()
	d.answeredThroughALapse(func() { undo = testenv.Immutable(t, d.storeDB, d.storeDB+"-wal") }, func() { undo() })
}
