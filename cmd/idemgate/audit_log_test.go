package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tdlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// auditStore is a SQLite store whose acme log holds, at positions:
// 0-3 the disputed operation (forwarded by run-A, released, forwarded by
// run-B, succeeded 201 T-1), 4-6 a failed one, 7-8 the partial one
// (forwarded, then unknown), 9 the pending one's forwarded; its completion,
// and a replay and a conflict of the disputed key, are not sealed.
// Checkpoints: sizes 7 and 8; 8 and 9 are sealed, not signed.
type auditStore struct {
	dsn, dir, pub                       string
	s                                   migratingStore
	disputed, failed, partial, pending  *ledger.Operation
	verifier                            note.Verifier
	signedSealer, unsignedSealer        *audit.Sealer
	disputedFP, failedFP, traceDisputed string
}

func newAuditStore(t *testing.T) *auditStore {
	t.Helper()
	a := &auditStore{dir: t.TempDir(), traceDisputed: "4bf92f3577b34da6a3ce929d0e0e4736",
		disputedFP: "sha256:" + strings.Repeat("a1", 32), failedFP: "sha256:" + strings.Repeat("b2", 32)}
	a.dsn = "sqlite:" + filepath.Join(a.dir, "audit.db")
	s := dbtest.SQLiteAt(t, filepath.Join(a.dir, "audit.db"))
	a.s = s
	key := filepath.Join(a.dir, "audit.key")
	if _, err := audit.Keygen(key, "idemgate"); err != nil {
		t.Fatal(err)
	}
	a.pub = key + ".pub"
	sg, err := audit.LoadSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	if a.verifier, err = audit.LoadVerifier(a.pub); err != nil {
		t.Fatal(err)
	}
	a.signedSealer = &audit.Sealer{Log: s, Signing: audit.Signing{Signer: sg, Name: "idemgate", Every: 1}}
	a.unsignedSealer = &audit.Sealer{Log: s, Signing: audit.Signing{Name: "idemgate"}}
	a.build(t)
	return a
}

// build writes the operations' stories and seals them.
func (a *auditStore) build(t *testing.T) {
	c := context.Background()
	r := a.reserve(t, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "k-1", Fingerprint: a.disputedFP,
		Lease: time.Hour, Principal: "agent-7", RunID: "run-A", TraceID: a.traceDisputed})
	a.disputed = r.Op
	must(t, ignore(a.s.Release(c, *r.Lease, ledger.Note{Reason: "upstream 429"})))
	r = a.acquire(t, r.Op.ID, "run-B")
	a.complete(t, r, ledger.Succeeded, 201, "T-1")

	r = a.reserve(t, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "k-2", Fingerprint: a.failedFP,
		Principal: "agent-8", RunID: "run-C"})
	a.failed = r.Op
	a.complete(t, a.acquire(t, r.Op.ID, ""), ledger.Failed, 422, "")

	r = a.reserve(t, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "globex", Key: "k-3", Fingerprint: "sha256:cc", Lease: time.Hour})
	a.complete(t, r, ledger.Succeeded, 200, "G-1")
	a.seal(t, a.signedSealer)

	r = a.reserve(t, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "k-5", Fingerprint: "sha256:dd", Lease: time.Hour,
		RunID: "run-D"})
	a.partial = r.Op
	a.seal(t, a.signedSealer)
	must(t, ignore(a.s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "upstream_timeout"})))

	r = a.reserve(t, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "k-4", Fingerprint: "sha256:ee", Lease: time.Hour,
		RunID: "run-E"})
	a.pending = r.Op
	a.seal(t, a.unsignedSealer)
	a.complete(t, r, ledger.Succeeded, 201, "T-4")
	a.retries(t)
}

// retries records, unsealed, two later requests with the disputed key, as
// the gateway does: one replayed the stored answer, one had another body.
func (a *auditStore) retries(t *testing.T) {
	e := audit.Event{At: time.Now(), Tenant: "acme", OperationID: a.disputed.ID, Principal: "agent-9",
		Key: "k-1", Route: "POST /v1/tickets", Actor: "gw"}
	replay, conflict := e, e
	replay.Kind, replay.RunID, replay.Fingerprint, replay.UpstreamStatus, replay.ResultRef =
		audit.Replayed, "run-F", a.disputedFP, 201, "T-1"
	conflict.Kind, conflict.RunID, conflict.Fingerprint = audit.Conflict, "run-G", "sha256:ff"
	must(t, a.s.RecordEvents(context.Background(), []audit.Event{replay, conflict}))
}

func (a *auditStore) reserve(t *testing.T, p ledger.ReserveParams) ledger.Reservation {
	t.Helper()
	p.Route, p.Retention, p.Actor = "/v1/tickets", time.Hour, "gw"
	r, err := a.s.Reserve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (a *auditStore) acquire(t *testing.T, id, run string) ledger.Reservation {
	t.Helper()
	r, err := a.s.Acquire(context.Background(), ledger.AcquireParams{ID: id, Lease: time.Hour, Actor: "gw", RunID: run})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (a *auditStore) complete(t *testing.T, r ledger.Reservation, st ledger.State, status int, ref string) {
	t.Helper()
	must(t, ignore(a.s.Complete(context.Background(), *r.Lease, ledger.Outcome{State: st, ResultRef: ref,
		Response: &ledger.Response{Status: status, Body: []byte(`{"secret":"pii@example.com"}`)}})))
}

func (a *auditStore) seal(t *testing.T, sl *audit.Sealer) {
	t.Helper()
	for {
		n, err := sl.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// export runs audit export of acme into a file and returns its lines.
func (a *auditStore) export(t *testing.T) (string, [][]byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "acme.jsonl")
	r := run(t, "", "audit", "export", "--tenant", "acme", "--out", out, "--store", a.dsn)
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, `exported 10 events and 2 checkpoints of tenant "acme"`) {
		t.Fatalf("audit export: %+v", r)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ignore[T any](_ T, err error) error { return err }

// TestAuditExport: export refuses a missing tenant, writes the tenant's
// sealed events in log order and its checkpoints, the same to stdout as
// to a file (and no temporary file left); the export verifies, and a
// flipped byte is named by its line, exit 3.
func TestAuditExport(t *testing.T) {
	t.Parallel()
	a := newAuditStore(t)
	if r := run(t, "", "audit", "export", "--store", a.dsn); r.code != 1 || !strings.Contains(r.stderr, "--tenant is required") {
		t.Fatalf("no tenant: %+v", r)
	}
	out, lines := a.export(t)
	if len(lines) != 12 {
		t.Fatalf("export has %d lines, want 10 events and 2 checkpoints", len(lines))
	}
	for i, l := range lines[:10] {
		e, err := audit.ParseEvent(l)
		if err != nil || e.Seq != int64(i) || e.Tenant != "acme" || bytes.Contains(l, []byte("pii@")) {
			t.Fatalf("line %d: %s %v", i+1, l, err)
		}
	}
	for _, l := range lines[10:] {
		if !bytes.HasPrefix(l, []byte(`{"checkpoint":"idemgate/acme\n`)) {
			t.Fatalf("checkpoint line: %s", l)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*"))
	r := run(t, "", "audit", "export", "--tenant", "acme", "--store", a.dsn)
	data, _ := os.ReadFile(out)
	if len(left) != 0 || r.code != 0 || r.stdout != string(data) {
		t.Fatalf("temporary files %v; stdout export %+v", left, r)
	}
	testUnsignedTail(t, a, out)
	testTamperedExport(t, a, data)
}

// testUnsignedTail: events after the last signed checkpoint (here 2 of
// 10: a forged one appended would be the same) are vouched for by no
// signature, so verify fails, exit 3, and says so; unless they are
// accepted unverified with --allow-unsigned-tail, which says that too.
func testUnsignedTail(t *testing.T, a *auditStore, export string) {
	r := run(t, "", "audit", "verify", export, "--key", a.pub)
	if r.code != 3 || r.stdout != "" || !strings.Contains(r.stderr, "events 8 to 9 follow the last signed checkpoint "+
		"(size 8)") || !strings.Contains(r.stderr, "--allow-unsigned-tail") {
		t.Fatalf("verify of an unsigned tail: %+v", r)
	}
	r = run(t, "", "audit", "verify", export, "--key", a.pub, "--allow-unsigned-tail")
	if r.code != 0 || !strings.Contains(r.stdout, "ok: idemgate/acme, 10 events, 2 checkpoints, the largest of size 8") ||
		!strings.Contains(r.stdout, "2 events after it not signed, accepted unverified (--allow-unsigned-tail)") {
		t.Fatalf("verify --allow-unsigned-tail: %+v", r)
	}
}

// testTamperedExport flips one byte of the export and verifies again.
func testTamperedExport(t *testing.T, a *auditStore, data []byte) {
	line3 := bytes.IndexByte(data, '\n') + 1
	line3 += bytes.IndexByte(data[line3:], '\n') + 1
	key := bytes.Index(data, []byte(`"key":"k-1"`)) + len(`"key":"`)
	for _, tc := range []struct {
		at   int
		want []string
	}{
		{line3, []string{"line 3: not an event"}},                                            // '{' becomes 'z'
		{key, []string{"line 7:", "the first 7 events", "an event from 0 to 6 was changed"}}, // k-1 becomes j-1
	} {
		bad := bytes.Clone(data)
		bad[tc.at] ^= 1
		path := filepath.Join(t.TempDir(), "tampered.jsonl")
		must(t, os.WriteFile(path, bad, 0o600))
		r := run(t, "", "audit", "verify", path, "--key", a.pub)
		for _, w := range tc.want {
			if r.code != 3 || !strings.Contains(r.stderr, w) {
				t.Errorf("byte %d flipped: want exit 3 and %q, got %+v", tc.at, w, r)
			}
		}
	}
}

// TestAuditExportAtomic: a failed write leaves the file as it was, and no
// temporary file; a missing directory is an error, and creates nothing.
func TestAuditExportAtomic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "acme.jsonl")
	must(t, os.WriteFile(path, []byte("earlier export\n"), 0o600))
	err := writeAtomic(path, func(w io.Writer) error {
		fmt.Fprintln(w, "half an export")
		return errors.New("export: the store went away")
	})
	data, _ := os.ReadFile(path)
	entries, _ := os.ReadDir(dir)
	if err == nil || string(data) != "earlier export\n" || len(entries) != 1 {
		t.Fatalf("failed write: %v, %q, %v", err, data, entries)
	}
	a := newAuditStore(t)
	missing := filepath.Join(dir, "no", "such", "dir", "x.jsonl")
	if r := run(t, "", "audit", "export", "--tenant", "acme", "--out", missing, "--store", a.dsn); r.code != 1 {
		t.Fatalf("missing directory: %+v", r)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Fatal("export created a directory")
	}
}

// tlogProof is a C2SP tlog-proof, parsed and checked independently: by
// transparency-dev's checkpoint parser and RFC 6962 inclusion verifier.
type tlogProof struct {
	index, size uint64
}

// checkProof parses text and verifies it against the leaves of an export.
func checkProof(a *auditStore, text []byte, leaves [][]byte) (tlogProof, error) {
	head, cp, ok := bytes.Cut(text, []byte("\n\n"))
	lines := strings.Split(string(head), "\n")
	if !ok || len(lines) < 2 || lines[0] != "c2sp.org/tlog-proof@v1" {
		return tlogProof{}, fmt.Errorf("not a tlog-proof: %q", text)
	}
	idx, err := strconv.ParseUint(strings.TrimPrefix(lines[1], "index "), 10, 64)
	if err != nil || !strings.HasPrefix(lines[1], "index ") || idx >= uint64(len(leaves)) {
		return tlogProof{}, fmt.Errorf("index line %q", lines[1])
	}
	var hashes [][]byte
	for _, l := range lines[2:] {
		h, err := base64.StdEncoding.DecodeString(l)
		if err != nil || len(h) != 32 {
			return tlogProof{}, fmt.Errorf("hash line %q", l)
		}
		hashes = append(hashes, h)
	}
	c, _, _, err := tdlog.ParseCheckpoint(cp, "idemgate/acme", a.verifier)
	if err != nil {
		return tlogProof{}, err
	}
	leaf := rfc6962.DefaultHasher.HashLeaf(leaves[idx])
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, c.Size, leaf, hashes, c.Hash); err != nil {
		return tlogProof{}, err
	}
	return tlogProof{idx, c.Size}, nil
}

// splitProofs cuts prove's stdout into its proofs.
func splitProofs(out string) [][]byte {
	parts := strings.Split(out, "c2sp.org/tlog-proof@v1\n")
	var ps [][]byte
	if parts[0] != "" {
		ps = append(ps, []byte(parts[0])) // not a proof: checkProof refuses it
	}
	for _, p := range parts[1:] {
		ps = append(ps, []byte("c2sp.org/tlog-proof@v1\n"+p))
	}
	return ps
}

// TestAuditProve: prove prints a checked C2SP proof for each event under
// the latest checkpoint, to stdout or one file per event; lists the
// events with none yet; and exits 2 only when no event is proven.
func TestAuditProve(t *testing.T) {
	t.Parallel()
	a := newAuditStore(t)
	_, lines := a.export(t)
	r := run(t, "", "audit", "prove", a.disputed.ID, "--store", a.dsn)
	proofs := splitProofs(r.stdout)
	if r.code != 0 || len(proofs) != 4 || !strings.Contains(r.stderr, "proved 4 of 6 events") ||
		!strings.Contains(r.stderr, "event (unsealed) replayed: no proof yet: not sealed yet") {
		t.Fatalf("prove: %+v", r)
	}
	outDir := filepath.Join(t.TempDir(), "proofs")
	if r := run(t, "", "audit", "prove", a.disputed.ID, "--out", outDir, "--store", a.dsn); r.code != 0 || r.stdout != "" {
		t.Fatalf("prove --out: %+v", r)
	}
	for i, text := range proofs {
		p, err := checkProof(a, text, lines[:10])
		if err != nil || p != (tlogProof{uint64(i), 8}) {
			t.Fatalf("proof %d: %+v %v\n%s", i, p, err, text)
		}
		file, err := os.ReadFile(filepath.Join(outDir, fmt.Sprintf("%d.proof", i)))
		if err != nil || !bytes.Equal(file, text) {
			t.Fatalf("%d.proof: %v %q", i, err, file)
		}
		wrong := append([][]byte{}, lines[:10]...)
		wrong[i] = lines[(i+1)%10]
		if _, err := checkProof(a, text, wrong); err == nil {
			t.Fatalf("proof %d also proves another event", i)
		}
	}
	r = run(t, "", "audit", "prove", a.partial.ID, "--store", a.dsn)
	proofs = splitProofs(r.stdout)
	if r.code != 0 || len(proofs) != 1 || !strings.Contains(r.stderr,
		"event 8 unknown: no proof yet: sealed, not yet covered by a signed checkpoint") {
		t.Fatalf("prove a partly covered operation: %+v", r)
	}
	if p, err := checkProof(a, proofs[0], lines[:10]); err != nil || p != (tlogProof{7, 8}) {
		t.Fatalf("partial proof: %+v %v", p, err)
	}
	r = run(t, "", "audit", "prove", a.pending.ID, "--store", a.dsn)
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "event 9 forwarded: no proof yet: sealed, not yet covered") ||
		!strings.Contains(r.stderr, "event (unsealed) succeeded: no proof yet: not sealed yet") ||
		!strings.Contains(r.stderr, "none of the 2 events") {
		t.Fatalf("prove an uncovered operation: %+v", r)
	}
	if r := run(t, "", "audit", "prove", "op_nope", "--store", a.dsn); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("prove a missing operation: %+v", r)
	}
}
