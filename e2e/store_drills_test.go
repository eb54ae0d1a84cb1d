package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
)

// The store drills: the gateway's SQLite file on a real filesystem that
// fills up, turns read-only or loses the file, under a running gateway.
// A store that cannot write must answer store_unavailable with nothing
// reserved and nothing forwarded, say so at /readyz, and come back by
// itself when it can write again. Effects are counted at the ops API.

// ready reads the gateway's /readyz.
func (d *drill) ready() int {
	resp, err := http.Get(d.gw.URL + "/readyz")
	if err != nil {
		d.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (d *drill) waitReady(status int) {
	d.t.Helper()
	waitFor(d.t, fmt.Sprintf("/readyz %d", status), func() bool { return d.ready() == status })
}

// refusedThrice sends one key three times, as a retrying client would, and
// wants store_unavailable each time, nothing reserved and nothing done.
func (d *drill) refusedThrice(key string, effectsBefore int) {
	d.t.Helper()
	for range 3 {
		r := d.keyed("/v1/tickets", key, ticket("", "while the store cannot write"))
		want(d.t, r, 503, "store_unavailable")
		if r.header.Get("Retry-After") == "" {
			d.t.Fatalf("store_unavailable without Retry-After: %+v", r)
		}
	}
	d.wantEffects("tickets_created", effectsBefore)
	if r := d.control("GET", "/operations?key="+key, ""); r.status != 404 && r.status != 503 {
		d.t.Fatalf("the control API knows the refused key: %+v", r)
	}
}

// recovered checks that service came back by itself: the refused key now
// runs once and replays.
func (d *drill) recovered(key string, effects int) {
	d.t.Helper()
	d.waitReady(200)
	want(d.t, d.keyed("/v1/tickets", key, ticket("", "while the store cannot write")), 201, "")
	again := d.keyed("/v1/tickets", key, ticket("", "while the store cannot write"))
	if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" {
		d.t.Fatalf("replay after recovery: %+v", again)
	}
	d.wantEffects("tickets_created", effects)
}

// TestDrillDiskBelowFloor: below the free-space floor (64 MiB by default)
// the gateway refuses new keys before the disk is full, keeps replaying
// what it has, and serves again once space returns.
func TestDrillDiskBelowFloor(t *testing.T) {
	t.Parallel()
	dir := testenv.Tmpfs(t, 96<<20)
	d := newDrill(t, setup{storeDir: dir})
	first := d.keyed("/v1/tickets", "before", ticket("", "before"))
	want(t, first, 201, "")
	free := testenv.Fill(t, dir, 32<<20)
	d.waitReady(503)
	d.refusedThrice("K", 1)
	if r := d.keyed("/v1/tickets", "before", ticket("", "before")); r.status != 201 || r.body != first.body {
		t.Fatalf("a replay below the floor: %+v", r)
	}
	free()
	d.recovered("K", 2)
}

// TestDrillDiskFull: with no floor, the disk filled to its last byte.
// Every answer is either a refusal with nothing done, or a write done
// once; after space returns every key runs at most once, and what was
// answered 201 and recorded replays byte for byte.
func TestDrillDiskFull(t *testing.T) {
	t.Parallel()
	dir := testenv.Tmpfs(t, 16<<20)
	d := newDrill(t, setup{storeDir: dir, storeQuery: "?min_free=0", config: "record_deadline: 2s\n"})
	free := testenv.Fill(t, dir, 0)
	first := map[string]reply{}
	refused := 0
	for i := 0; i < 40; i++ {
		key := fmt.Sprint("k", i)
		r := d.keyed("/v1/tickets", key, ticket("", key))
		switch {
		case r.status == 503 && problemCode(r) == "store_unavailable":
			refused++
		case r.status != 201:
			t.Fatalf("%s on a full disk: %+v", key, r)
		}
		first[key] = r
	}
	if refused == 0 {
		t.Fatal("the disk never filled")
	}
	created := len(first) - refused
	d.wantEffects("tickets_created", created)
	free()
	d.waitReady(200)
	for key, r := range first {
		again := d.keyed("/v1/tickets", key, ticket("", key))
		switch {
		case r.status == 503:
			want(t, again, 201, "")
		case again.status == 201 && again.body != r.body:
			t.Fatalf("%s replays another answer: %q, first %q", key, again.body, r.body)
		case again.status != 201 && again.status != 409:
			t.Fatalf("%s after recovery: %+v", key, again)
		}
	}
	d.wantEffects("tickets_created", len(first))
	t.Logf("%d created on a full disk, %d refused", created, refused)
}

// TestDrillStoreReadOnly: the store file made unwritable under the running
// gateway (chattr +i, which binds root too): refused, not ready, nothing
// done; writable again, it serves by itself.
func TestDrillStoreReadOnly(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	want(t, d.keyed("/v1/tickets", "before", ticket("", "before")), 201, "")
	undo := testenv.Immutable(t, d.storeDB, d.storeDB+"-wal")
	d.refusedThrice("K", 1)
	d.waitReady(503)
	undo()
	d.recovered("K", 2)
}

// TestDrillStoreFileDeleted: the store file deleted under the running
// gateway. SQLite would go on writing to the unlinked inode, and every
// answer given would vanish with the process; the gateway refuses instead.
func TestDrillStoreFileDeleted(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{storeDir: t.TempDir()})
	want(t, d.keyed("/v1/tickets", "before", ticket("", "before")), 201, "")
	if err := os.Remove(d.storeDB); err != nil {
		t.Fatal(err)
	}
	d.refusedThrice("K", 1)
	d.waitReady(503)
	if _, err := os.Stat(filepath.Join(filepath.Dir(d.storeDB), "gateway.db")); err == nil {
		t.Fatal("the deleted store file came back")
	}
}
