package audit

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tdlog "github.com/transparency-dev/formats/log"

	"github.com/idemgate/idemgate/fingerprint"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// testLog is a tenant's log built in memory and exported to a file.
type testLog struct {
	dir      string
	signer   note.Signer
	verifier note.Verifier
	events   []Event
	hashes   Hashes
	signed   map[int64][]byte // by size
	origin   string
}

func keys(t *testing.T, name string) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// newLog appends n events, signing a checkpoint every `every` of them
// and at the end.
func newLog(t *testing.T, n, every int) *testLog {
	t.Helper()
	s, v := keys(t, "idemgate-test")
	l := &testLog{dir: t.TempDir(), signer: s, verifier: v, signed: map[int64][]byte{}, origin: Origin("idemgate-test", "acme")}
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	kinds := []Kind{Received, Forwarded, Answered, Succeeded, Replayed}
	for i := range n {
		e := Event{Seq: int64(i), At: at.Add(time.Duration(i) * time.Millisecond), Tenant: "acme",
			OperationID: fmt.Sprintf("op_%d", i/5), Kind: kinds[i%5], Principal: "agent", RunID: "run-1",
			Key: fmt.Sprintf("key-%d", i/5), Fingerprint: "sha256:" + strings.Repeat("ab", 32), Route: "POST /v1/tickets",
			Target: "POST /v1/tickets"}
		if e.Kind == Succeeded {
			e.From, e.To, e.UpstreamStatus, e.ResultRef = "executing", "succeeded", 201, fmt.Sprintf("T-%d", i)
		}
		h, err := e.LeafHash()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.hashes.Append(int64(i), h); err != nil {
			t.Fatal(err)
		}
		l.events = append(l.events, e)
		if (i+1)%every == 0 || i == n-1 {
			l.sign(t, int64(i+1))
		}
	}
	return l
}

func (l *testLog) root(t *testing.T, size int64) tlog.Hash {
	t.Helper()
	r, err := tlog.TreeHash(size, l.hashes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (l *testLog) sign(t *testing.T, size int64) {
	b, err := Checkpoint{Origin: l.origin, Size: size, Root: l.root(t, size)}.Sign(l.signer)
	if err != nil {
		t.Fatal(err)
	}
	l.signed[size] = b
}

// export writes the log's lines, edited by edit (nil: as they are).
func (l *testLog) export(t *testing.T, name string, edit func(lines [][]byte) [][]byte) string {
	t.Helper()
	var lines [][]byte
	for _, e := range l.events {
		b, err := e.Leaf()
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, b)
	}
	for size := int64(0); size <= int64(len(l.events)); size++ {
		if s, ok := l.signed[size]; ok {
			b, _ := CheckpointLine(s)
			lines = append(lines, b)
		}
	}
	if edit != nil {
		lines = edit(lines)
	}
	path := filepath.Join(l.dir, name)
	if err := os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerifyGoodExport(t *testing.T) {
	l := newLog(t, 2500, 1000)
	rep, err := Verify(l.export(t, "good.jsonl", nil), l.verifier)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != 2500 || rep.Checkpoints != 3 || rep.Largest.Size != 2500 || rep.Unsigned != 0 || rep.Origin != l.origin {
		t.Fatalf("report %+v", rep)
	}
}

// TestForgedTailIsNotCovered: an event appended after the last signed
// checkpoint, in canonical form at its right place, verifies as an event,
// but no signature covers it, and Covered says which and where.
func TestForgedTailIsNotCovered(t *testing.T) {
	l := newLog(t, 20, 10)
	if rep, err := Verify(l.export(t, "good.jsonl", nil), l.verifier); err != nil || rep.Covered() != nil {
		t.Fatalf("a log signed to its end: %+v, %v, %v", rep, err, rep.Covered())
	}
	forged := l.events[19]
	forged.Seq, forged.Kind, forged.Key = 20, Resolved, "key-forged"
	line, err := forged.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	path := l.export(t, "forged.jsonl", func(lines [][]byte) [][]byte {
		return append(lines[:20:20], append([][]byte{line}, lines[20:]...)...)
	})
	rep, err := Verify(path, l.verifier)
	if err != nil || rep.Events != 21 || rep.Unsigned != 1 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	var tampered *Tampered
	if err := rep.Covered(); !errors.As(err, &tampered) || tampered.Line != 21 || tampered.Seq != 20 ||
		!strings.Contains(err.Error(), "event 20 follows the last signed checkpoint (size 20)") {
		t.Fatalf("Covered: %v", err)
	}
}

// TestTamperingIsNamed: each way of editing an export is detected, and the
// error says which and where.
func TestTamperingIsNamed(t *testing.T) {
	l := newLog(t, 2500, 1000)
	_, otherV := keys(t, "idemgate-test")
	otherS, _ := keys(t, "idemgate-test")
	forged, err := Checkpoint{Origin: l.origin, Size: 1000, Root: tlog.RecordHash([]byte("another tree"))}.Sign(l.signer)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := Checkpoint{Origin: l.origin, Size: 2500, Root: l.root(t, 2500)}.Sign(otherS)
	if err != nil {
		t.Fatal(err)
	}
	early := l.export(t, "early.jsonl", nil)
	for _, c := range []struct {
		name string
		edit func([][]byte) [][]byte
		want string
		v    note.Verifier
	}{
		{"a value changed, canonical still", func(ls [][]byte) [][]byte {
			ls[1234] = bytes.Replace(ls[1234], []byte(`"key-246"`), []byte(`"key-999"`), 1)
			return ls
		}, "the first 2000 events do not hash to the root signed for that size", nil},
		{"a flipped byte", func(ls [][]byte) [][]byte {
			ls[10] = bytes.Replace(ls[10], []byte(`"run_id":"run-1"`), []byte(`"run_id":"run-2"`), 1)
			return ls
		}, "events do not hash", nil},
		{"a non-canonical edit", func(ls [][]byte) [][]byte {
			ls[7] = bytes.Replace(ls[7], []byte(`"tenant":"acme"`), []byte(`"tenant": "acme"`), 1)
			return ls
		}, "line 8, event 7: not the canonical form", nil},
		{"two events swapped", func(ls [][]byte) [][]byte {
			ls[20], ls[21] = ls[21], ls[20]
			return ls
		}, "line 21, event 21: event 20 belongs here: events 20 to 20 are missing (deleted) or out of order", nil},
		{"an event repeated", func(ls [][]byte) [][]byte {
			return append(ls[:41:41], ls[40:]...)
		}, "line 42, event 40: out of order", nil},
		{"one deleted", func(ls [][]byte) [][]byte { return append(ls[:30:30], ls[31:]...) },
			"line 31, event 31: event 30 belongs here", nil},
		{"the tail truncated behind a checkpoint", func(ls [][]byte) [][]byte {
			return append(ls[:1500:1500], ls[2500:]...)
		}, "the export ends at 1500 events, but a checkpoint", nil},
		{"two checkpoints, one size, two roots", func(ls [][]byte) [][]byte {
			b, _ := CheckpointLine(forged)
			return append(ls, b)
		}, "two checkpoints of size 1000 with different roots", nil},
		{"a checkpoint signed by another key", func(ls [][]byte) [][]byte {
			b, _ := CheckpointLine(foreign)
			return append(ls, b)
		}, "checkpoint not signed by this key", nil},
		{"the export checked with another key", nil, "checkpoint not signed by this key", otherV},
	} {
		v := c.v
		if v == nil {
			v = l.verifier
		}
		_, err := Verify(l.export(t, "tampered.jsonl", c.edit), v)
		var tampered *Tampered
		if !errors.As(err, &tampered) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Truncated behind a checkpoint the verifier kept from earlier, the
	// export itself holding none beyond its end.
	short := l.export(t, "short.jsonl", func(ls [][]byte) [][]byte {
		b, _ := CheckpointLine(l.signed[1000])
		return append(ls[:1200:1200], b)
	})
	if _, err := Verify(short, l.verifier); err != nil {
		t.Fatalf("a consistent shorter export: %v", err)
	}
	if _, err := Verify(short, l.verifier, early); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated behind an earlier checkpoint: %v", err)
	}
}

// TestCrossCheck: the roots, checkpoints and inclusion proofs of this log
// verify with an independent implementation (transparency-dev's).
func TestCrossCheck(t *testing.T) {
	l := newLog(t, 777, 1000)
	size := int64(777)
	root := l.root(t, size)
	var f Frontier
	for _, e := range l.events {
		h, _ := e.LeafHash()
		f.Append(h)
	}
	if f.Root() != root {
		t.Fatal("the frontier's root is not tlog's")
	}
	cp, _, _, err := tdlog.ParseCheckpoint(l.signed[size], l.origin, l.verifier)
	if err != nil || cp.Size != uint64(size) || !bytes.Equal(cp.Hash, root[:]) {
		t.Fatalf("transparency-dev reads the checkpoint: %+v %v", cp, err)
	}
	for _, i := range []int64{0, 1, 100, 511, 512, 776} {
		p, err := tlog.ProveRecord(size, i, l.hashes)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := l.events[i].Leaf()
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(i), uint64(size),
			rfc6962.DefaultHasher.HashLeaf(leaf), hashes(p), root[:]); err != nil {
			t.Fatalf("inclusion of %d: %v", i, err)
		}
	}
	for _, old := range []int64{1, 200, 512, 776} {
		p, err := tlog.ProveTree(size, old, l.hashes)
		if err != nil {
			t.Fatal(err)
		}
		oldRoot := l.root(t, old)
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, uint64(old), uint64(size), hashes(p), oldRoot[:], root[:]); err != nil {
			t.Fatalf("consistency %d→%d: %v", old, size, err)
		}
	}
	var empty Frontier
	if empty.Root() != tlog.Hash(rfc6962.DefaultHasher.EmptyRoot()) {
		t.Fatal("empty root")
	}
}

func hashes[T ~[]tlog.Hash](p T) [][]byte {
	out := make([][]byte, len(p))
	for i := range p {
		out[i] = p[i][:]
	}
	return out
}

// TestProofFormat: the C2SP tlog-proof text names the index, the proof's
// hashes and the checkpoint.
func TestProofFormat(t *testing.T) {
	l := newLog(t, 10, 10)
	p, err := tlog.ProveRecord(10, 3, l.hashes)
	if err != nil {
		t.Fatal(err)
	}
	text := string(FormatProof(3, p, l.signed[10]))
	if !strings.HasPrefix(text, "c2sp.org/tlog-proof@v1\nindex 3\n") || !strings.Contains(text, "\n\n"+l.origin+"\n10\n") {
		t.Fatalf("proof:\n%s", text)
	}
}

// TestKeygen: the signing key is private to its owner, the verifier key
// is printed and written beside it, and they sign and verify together.
func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.key")
	vkey, err := Keygen(path, "idemgate")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v", fi, err)
	}
	if _, err := Keygen(path, "idemgate"); err == nil {
		t.Fatal("keygen overwrote a key")
	}
	s, err := LoadSigner(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{path + ".pub", vkey} {
		v, err := LoadVerifier(k)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Checkpoint{Origin: "o/acme", Size: 0, Root: (&Frontier{}).Root()}.Sign(s)
		if _, err := OpenCheckpoint(b, v); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
}

// TestLeafIsCanonical: the leaf written field by field is exactly RFC
// 8785's canonical JSON of the event's object, as the general encoder
// writes it.
func TestLeafIsCanonical(t *testing.T) {
	for _, e := range []Event{
		{Seq: 0, At: time.Unix(0, 1000).UTC(), Tenant: "acme", Kind: Received},
		{Seq: 1 << 40, At: time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC), Tenant: "ténant", OperationID: "op_1",
			Kind: Succeeded, Principal: "agent\u2028x", RunID: "run\"1", TraceID: "0af7", Key: "k\n\u0001é😀", Fingerprint: "sha256:ab",
			Route: "POST /v1/x", Target: "POST /v1/x?a=1", From: "executing", To: "succeeded", Actor: "gw", Reason: "201",
			UpstreamStatus: 201, ResultRef: "T-1", ResponseSHA256: "ff"},
		{Seq: 2, At: time.Unix(5, 0).UTC(), Tenant: "acme", Kind: Forwarded, Namespace: "mcp/tickets",
			Key: "create_ticket/bot/i-1"},
	} {
		got, err := e.Leaf()
		if err != nil {
			t.Fatal(err)
		}
		str := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		var status any
		if e.UpstreamStatus != 0 {
			status = int64(e.UpstreamStatus)
		}
		object := map[string]any{
			"seq": e.Seq, "at": e.At.UTC().Format("2006-01-02T15:04:05.000000Z"), "tenant": e.Tenant,
			"operation_id": str(e.OperationID), "kind": string(e.Kind), "principal": str(e.Principal),
			"run_id": str(e.RunID), "trace_id": str(e.TraceID), "key": str(e.Key), "fingerprint": str(e.Fingerprint),
			"route": str(e.Route), "target": str(e.Target), "from": str(e.From), "to": str(e.To), "actor": str(e.Actor),
			"reason": str(e.Reason), "upstream_status": status, "result_ref": str(e.ResultRef),
			"response_sha256": str(e.ResponseSHA256)}
		if e.Namespace != "" {
			object["namespace"] = e.Namespace
		}
		want, err := fingerprint.Canonical(object)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("leaf\n got %s\nwant %s %v", got, want, err)
		}
		back, err := ParseEvent(got)
		if err != nil || !back.At.Equal(e.At) || back.Key != e.Key || back.Seq != e.Seq ||
			back.UpstreamStatus != e.UpstreamStatus || back.Namespace != e.Namespace {
			t.Fatalf("parsed back: %+v %v", back, err)
		}
	}
	if _, err := (Event{Tenant: "a", Kind: Received, Key: "\xff"}).Leaf(); err == nil {
		t.Fatal("invalid UTF-8 made a leaf")
	}
}

// TestClientsNamespaceKeepsTheLeaf: an event in the clients' namespace
// (named, or not, as every event of before namespaces) has the leaf, and
// so the hash, it had before namespaces were; any other namespace is part
// of it.
func TestClientsNamespaceKeepsTheLeaf(t *testing.T) {
	before := Event{Seq: 3, At: time.Unix(7, 0).UTC(), Tenant: "acme", Kind: Succeeded, Key: "k-1", Route: "POST /v1/t"}
	want := `{"actor":null,"at":"1970-01-01T00:00:07.000000Z","fingerprint":null,"from":null,"key":"k-1",` +
		`"kind":"succeeded","operation_id":null,"principal":null,"reason":null,"response_sha256":null,` +
		`"result_ref":null,"route":"POST /v1/t","run_id":null,"seq":3,"target":null,"tenant":"acme","to":null,` +
		`"trace_id":null,"upstream_status":null}`
	clients := before
	clients.Namespace = ClientsNamespace
	for _, e := range []Event{before, clients} {
		if leaf, err := e.Leaf(); err != nil || string(leaf) != want {
			t.Fatalf("namespace %q: leaf %s %v, want %s", e.Namespace, leaf, err, want)
		}
	}
	other := before
	other.Namespace = "consumer/billing"
	a, _ := before.LeafHash()
	b, err := other.LeafHash()
	if err != nil || a == b {
		t.Fatalf("another namespace has the clients' hash: %v", err)
	}
}
