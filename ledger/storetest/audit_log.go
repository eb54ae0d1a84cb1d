package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

func runAuditLog(t *testing.T, b Backend) {
	t.Run("AuditTransitions", inParallel(b, testAuditTransitions))
	t.Run("AuditContext", inParallel(b, testAuditContext))
	t.Run("AuditRecordEvents", inParallel(b, testAuditRecordEvents))
	t.Run("AuditSeal", inParallel(b, testAuditSeal))
	t.Run("AuditCheckpointsDue", inParallel(b, testAuditCheckpointsDue))
	t.Run("AuditNeverForks", inParallel(b, testAuditNeverForks))
	t.Run("RaceSealers", inParallel(b, testRaceSealers))
}

// testAuditContext: the request's context (principal, target, agent run,
// trace) is kept on the operation from its reservation, shown on it, and
// written into each of its events; a later sender's run replaces it; a
// final event names the stored response by its SHA-256.
func testAuditContext(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	p := Params(Long)
	p.Principal, p.Target, p.RunID, p.TraceID = "agent-7", "POST /v1/tickets", "run-A", "4bf92f3577b34da6a3ce929d0e0e4736"
	r := reserve(t, s, p)
	if _, err := s.Release(c, *r.Lease, ledger.Note{Reason: "429"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "gw", RunID: "run-B"})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"T-1"}`)
	if _, err := s.Complete(c, *res.Lease, ledger.Outcome{State: ledger.Succeeded, ResultRef: "T-1",
		Response: &ledger.Response{Status: 201, Body: body}}); err != nil {
		t.Fatal(err)
	}
	op, err := s.Get(c, r.Op.ID)
	if err != nil || op.Principal != "agent-7" || op.Target != p.Target || op.RunID != "run-B" || op.TraceID != p.TraceID ||
		op.ResponseSHA256 != (&ledger.Response{Body: body}).SHA256() {
		t.Fatalf("the operation's context: %+v %v", op, err)
	}
	es, err := s.AuditEvents(c, ledger.AuditParams{OperationID: r.Op.ID})
	if err != nil || len(es) != 4 {
		t.Fatalf("events %+v %v", es, err)
	}
	for i, wantRun := range []string{"run-A", "run-A", "run-B", "run-B"} {
		e := es[i]
		if e.Principal != "agent-7" || e.Target != p.Target || e.RunID != wantRun || e.TraceID != p.TraceID {
			t.Fatalf("event %d (%s) context: %+v", i, e.Kind, e)
		}
	}
	if last := es[3]; last.ResponseSHA256 != op.ResponseSHA256 || last.ResultRef != "T-1" || es[0].ResponseSHA256 != "" {
		t.Fatalf("the completion event: %+v", last)
	}
	ap := ApprovalParams(Long, Long)
	ap.Principal, ap.RunID = "agent-8", "run-C"
	pending := reserve(t, s, ap)
	es, err = s.AuditEvents(c, ledger.AuditParams{OperationID: pending.Op.ID})
	if err != nil || len(es) != 1 || es[0].Principal != "agent-8" || es[0].RunID != "run-C" {
		t.Fatalf("an approval's reservation: %+v %v", es, err)
	}
}

// signer makes a signing key and its verifier for a test log.
func signer(tb testing.TB) (note.Signer, note.Verifier) {
	skey, vkey, err := note.GenerateKey(rand.Reader, "idemgate-test")
	if err != nil {
		tb.Fatal(err)
	}
	sg, err := note.NewSigner(skey)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		tb.Fatal(err)
	}
	return sg, v
}

// seal runs rounds until the store has nothing left to seal.
func seal(tb testing.TB, sl *audit.Sealer) {
	tb.Helper()
	for i := 0; ; i++ {
		n, err := sl.Round(ctx(tb))
		if err != nil {
			tb.Fatalf("seal round %d: %v", i, err)
		}
		if n == 0 {
			return
		}
	}
}

// storyOps makes n operations of tenant, each with a story of two events.
func storyOps(tb testing.TB, s ledger.Store, tenant string, n int) {
	for range n {
		p := Params(Long)
		p.Tenant = tenant
		r := reserve(tb, s, p)
		if _, err := s.Complete(ctx(tb), *r.Lease, ledger.Outcome{State: ledger.Succeeded,
			Response: &ledger.Response{Status: 200}}); err != nil {
			tb.Fatal(err)
		}
	}
}

// testAuditSeal: sealed events take positions 0, 1, … in their tenant's
// log, in batches; the stored hashes give the tree an RFC 6962 library
// recomputes from the events, and the proofs of inclusion and consistency
// that check against signed checkpoints; an export verifies offline.
func testAuditSeal(t *testing.T, b Backend) {
	s := b.Fresh(t)
	sg, v := signer(t)
	file := filepath.Join(t.TempDir(), "checkpoints.jsonl")
	sl := &audit.Sealer{Log: s, Batch: 7, File: file, Signing: audit.Signing{Signer: sg, Name: "idemgate-test", Every: 10}}
	storyOps(t, s, "acme", 12)
	storyOps(t, s, "globex", 5)
	seal(t, sl)
	first := checkLog(t, s, "acme", 24)
	checkLog(t, s, "globex", 10)
	storyOps(t, s, "acme", 9)
	seal(t, sl)
	second := checkLog(t, s, "acme", 42)
	hashes := tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) { return s.AuditHashes(ctx(t), "acme", ix) })
	proof, err := tlog.ProveTree(second.Size, first.Size, hashes)
	if err != nil || tlog.CheckTree(proof, second.Size, second.Root, first.Size, first.Root) != nil {
		t.Fatalf("consistency %d → %d: %v", first.Size, second.Size, err)
	}
	export := filepath.Join(t.TempDir(), "acme.jsonl")
	f, err := os.Create(export)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ledger.ExportAudit(ctx(t), s, "acme", f); err != nil || n != 42 {
		t.Fatalf("export: %d %v", n, err)
	}
	f.Close()
	rep, err := audit.Verify(export, v, file)
	if err != nil || rep.Events != 42 || rep.Largest.Size != 42 || rep.Origin != "idemgate-test/acme" {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	es, _ := s.AuditLog(ctx(t), ledger.LogParams{Tenant: "acme", From: 40})
	proofs, err := ledger.ProveAudit(ctx(t), s, es[0].OperationID)
	if err != nil || len(proofs) != 2 || len(proofs[0].Text) == 0 || !bytes.HasPrefix(proofs[0].Text, []byte("c2sp.org/tlog-proof@v1\n")) {
		t.Fatalf("prove: %+v %v", proofs, err)
	}
}

// checkLog checks a tenant's sealed log against a tree recomputed from its
// events, and returns its latest checkpoint, which must be of its size.
func checkLog(tb testing.TB, s ledger.Store, tenant string, size int64) audit.Checkpoint {
	tb.Helper()
	es, err := s.AuditLog(ctx(tb), ledger.LogParams{Tenant: tenant})
	if err != nil || int64(len(es)) != size {
		tb.Fatalf("%s's log: %d events (%v), want %d", tenant, len(es), err, size)
	}
	var f audit.Frontier
	for i, e := range es {
		if e.Seq != int64(i) || e.Tenant != tenant {
			tb.Fatalf("%s's event %d has position %d", tenant, i, e.Seq)
		}
		h, err := e.LeafHash()
		if err != nil {
			tb.Fatal(err)
		}
		f.Append(h)
	}
	cps, err := s.AuditCheckpoints(ctx(tb), tenant, -1)
	if err != nil || len(cps) == 0 {
		tb.Fatalf("%s's checkpoints: %v", tenant, err)
	}
	last := cps[len(cps)-1]
	if latest, err := s.LatestCheckpoint(ctx(tb), tenant); err != nil || latest.Size != last.Size ||
		!bytes.Equal(latest.Signed, last.Signed) || latest.Origin != last.Origin {
		tb.Fatalf("%s's latest checkpoint: %+v %v, want size %d", tenant, latest, err, last.Size)
	}
	hashes := tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) { return s.AuditHashes(ctx(tb), tenant, ix) })
	stored, err := tlog.TreeHash(size, hashes)
	if last.Size != size || last.Root != f.Root() || err != nil || stored != f.Root() {
		tb.Fatalf("%s's checkpoint %d, root stored %v (%v), recomputed %v", tenant, last.Size, stored, err, f.Root())
	}
	for _, e := range es {
		p, err := tlog.ProveRecord(size, e.Seq, hashes)
		leaf, _ := e.LeafHash()
		if err != nil || tlog.CheckRecord(p, size, last.Root, e.Seq, leaf) != nil {
			tb.Fatalf("%s's event %d: no proof of inclusion (%v)", tenant, e.Seq, err)
		}
	}
	return last.Checkpoint
}

// testAuditCheckpointsDue: a checkpoint is signed once Every events are
// not covered, or once the latest is After old; never for no new event.
func testAuditCheckpointsDue(t *testing.T, b Backend) {
	s := b.Fresh(t)
	if _, err := s.LatestCheckpoint(ctx(t), "acme"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a checkpoint before any: %v", err)
	}
	sg, _ := signer(t)
	now := time.Now()
	sl := &audit.Sealer{Log: s, Now: func() time.Time { return now },
		Signing: audit.Signing{Signer: sg, Name: "t", Every: 100, After: time.Minute}}
	count := func() int {
		cps, err := s.AuditCheckpoints(ctx(t), "acme", -1)
		if err != nil {
			t.Fatal(err)
		}
		return len(cps)
	}
	storyOps(t, s, "acme", 1)
	seal(t, sl)
	if count() != 1 { // the first is due at once
		t.Fatalf("%d checkpoints after the first events", count())
	}
	storyOps(t, s, "acme", 1)
	seal(t, sl)
	if count() != 1 {
		t.Fatal("a checkpoint before Every events or After")
	}
	now = now.Add(2 * time.Minute)
	seal(t, sl)
	seal(t, sl)
	if count() != 2 {
		t.Fatalf("%d checkpoints once After passed, want 2 (and one, for no new event)", count())
	}
}

// testAuditNeverForks: the log never signs a second root for a size.
func testAuditNeverForks(t *testing.T, b Backend) {
	s := b.Fresh(t)
	sg, _ := signer(t)
	storyOps(t, s, "acme", 1)
	seal(t, &audit.Sealer{Log: s, Signing: audit.Signing{Signer: sg, Name: "t", Every: 1}})
	cps, _ := s.AuditCheckpoints(ctx(t), "acme", -1)
	forged := cps[0]
	forged.Root[0] ^= 1
	_, err := s.SealAudit(ctx(t), func(tx audit.SealTx) error { return tx.AddCheckpoint(ctx(t), forged) })
	if !errors.Is(err, audit.ErrForked) {
		t.Fatalf("a second root for size %d: %v", forged.Size, err)
	}
	same := cps[0]
	if _, err := s.SealAudit(ctx(t), func(tx audit.SealTx) error { return tx.AddCheckpoint(ctx(t), same) }); err != nil {
		t.Fatalf("the same checkpoint again: %v", err)
	}
	if again, _ := s.AuditCheckpoints(ctx(t), "acme", -1); len(again) != 1 || again[0].Root != cps[0].Root {
		t.Fatalf("checkpoints %+v", again)
	}
}

// testRaceSealers: sealers on two store handles, as two gateways would
// run them, and operations written meanwhile, make one log: every event
// sealed once, positions without gaps, every checkpoint on the tree.
func testRaceSealers(t *testing.T, b Backend) {
	s := b.Fresh(t)
	other := s
	if b.Another != nil {
		other = b.Another(t, s)
	}
	sg, _ := signer(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i, h := range []ledger.Store{s, other} {
		sl := &audit.Sealer{Log: h, Batch: 5, Signing: audit.Signing{Signer: sg, Name: "t", Every: 3}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := sl.Round(context.Background()); err != nil {
					t.Errorf("sealer %d: %v", i, err)
					return
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for range 4 {
		writers.Add(1)
		go func() { defer writers.Done(); storyOps(t, s, "acme", 15) }()
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	seal(t, &audit.Sealer{Log: s, Signing: audit.Signing{Signer: sg, Name: "t", Every: 1}})
	checkLog(t, s, "acme", 120)
	if es, err := s.AuditEvents(ctx(t), ledger.AuditParams{Tenant: "acme", Limit: ledger.MaxPage}); err != nil || len(es) != 120 {
		t.Fatalf("%d events (%v), want 120", len(es), err)
	}
}

// testAuditRecordEvents: events that record no transition are written in
// one step, as they are, and sealed with the others; a batch holding a
// transition's kind, or text a store cannot keep, is refused whole.
func testAuditRecordEvents(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, Params(Long))
	at := time.Now().UTC().Truncate(time.Microsecond)
	batch := []audit.Event{
		{At: at, Tenant: "acme", OperationID: r.Op.ID, Kind: audit.Replayed, RunID: "run-2", Key: r.Op.Key,
			Fingerprint: r.Op.Fingerprint, UpstreamStatus: 201, ResponseSHA256: "ab", Actor: "gw"},
		{At: at, Tenant: "acme", OperationID: r.Op.ID, Kind: audit.Conflict, Key: r.Op.Key, Fingerprint: "sha256:bbbb",
			Reason: "stored fingerprint sha256:aaaa"},
	}
	bad := append([]audit.Event{batch[0]}, audit.Event{At: at, Tenant: "acme", Kind: audit.Succeeded})
	if err := s.RecordEvents(c, bad); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a transition's kind recorded apart: %v", err)
	}
	nul := []audit.Event{{At: at, Tenant: "acme", Kind: audit.Received, Reason: "a\x00b"}}
	if err := s.RecordEvents(c, nul); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a NUL in an event: %v", err)
	}
	if err := s.RecordEvents(c, batch); err != nil {
		t.Fatal(err)
	}
	es, err := s.AuditEvents(c, ledger.AuditParams{OperationID: r.Op.ID})
	if err != nil || len(es) != 3 {
		t.Fatalf("events %+v %v", es, err)
	}
	got := es[1]
	if got.Kind != audit.Replayed || got.RunID != "run-2" || got.UpstreamStatus != 201 || !got.At.Equal(at) ||
		got.ResponseSHA256 != "ab" || es[2].Kind != audit.Conflict || es[2].Fingerprint != "sha256:bbbb" || es[2].UpstreamStatus != 0 {
		t.Fatalf("recorded %+v", es[1:])
	}
	sg, _ := signer(t)
	seal(t, &audit.Sealer{Log: s, Signing: audit.Signing{Signer: sg, Name: "t", Every: 1}})
	checkLog(t, s, "acme", 3)
}
