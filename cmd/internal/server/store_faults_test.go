package server_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// TestLostReservationReplyIsRecognised: the connection of a reservation is
// lost while the server goes on with it and commits it. The gateway
// repeats the same reservation, finds the operation its first attempt
// created, and runs it: one effect and a 201, where the first attempt's
// error alone would have left an operation executing with nobody to run
// it, and unknown once its lease lapsed, although nothing was sent. Not in
// parallel: testenv.WaitLockWait sees every session of the database.
func TestLostReservationReplyIsRecognised(t *testing.T) {
	c := context.Background()
	dsn := dbtest.PostgresDSN(t)
	u, _ := url.Parse(dsn)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	store := dbtest.PostgresAt(t, u.String())
	e := newEnv(t, store, dsn, "")
	// Another session's uncommitted row for the key makes the reservation
	// wait, inside the server, until that session rolls back.
	hold := testenv.Hold(t, dsn, `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state,
		retention_us, created_at, updated_at, expires_at) VALUES ('op_holder', 'acme', 'lost-reply',
		'POST /v1/tickets', 'x', 'prepared', 1, now(), now(), now())`)
	answer := make(chan reply, 1)
	go func() { answer <- e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "lost-reply") }()
	testenv.WaitLockWait(t, hold.Conn)
	proxy.Cut()
	time.Sleep(100 * time.Millisecond) // the gateway has its error, and tries again
	hold.Release()
	r := <-answer
	op, err := store.GetByKey(c, ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: "lost-reply"})
	if r.status != 201 || err != nil || op.State != ledger.Succeeded || e.up.count("/v1/tickets") != 1 {
		t.Fatalf("a reservation whose reply was lost: %d %s; operation %+v, %v; %d effects", r.status, r.body, op,
			err, e.up.count("/v1/tickets"))
	}
	if h, err := store.History(c, op.ID); err != nil || len(h) != 2 {
		t.Fatalf("history: %+v %v", h, err)
	}
}
