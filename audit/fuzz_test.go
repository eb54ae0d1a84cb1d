package audit

import (
	"bytes"
	"testing"
)

// FuzzParseEvent: a line that parses as an event, written again, is a
// canonical line that parses to the same leaf; nothing panics.
func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"actor":null,"at":"2026-12-03T10:00:00.000000Z","fingerprint":"sha256:aa","from":null,"key":"k",` +
		`"kind":"forwarded","operation_id":"op_1","principal":null,"reason":null,"response_sha256":null,"result_ref":null,` +
		`"route":"POST /v1/t","run_id":"run-1","seq":0,"target":null,"tenant":"acme","to":"executing","trace_id":null,` +
		`"upstream_status":null}`))
	f.Add([]byte(`{"seq":1,"kind":"replayed","tenant":"t","at":"2026-01-01T00:00:00Z","upstream_status":201,"key":"\u00e9"}`))
	f.Add([]byte(`{"seq":-1}`))
	f.Add([]byte(`{"seq":2,"kind":"forwarded","tenant":"t","at":"2026-01-01T00:00:00Z","namespace":"mcp/tickets","key":"a/b/c"}`))
	f.Add([]byte(`{"seq":2,"kind":"forwarded","tenant":"t","at":"2026-01-01T00:00:00Z","namespace":"clients"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseEvent(line)
		if err != nil {
			return
		}
		leaf, err := e.Leaf()
		if err != nil {
			return
		}
		again, err := ParseEvent(leaf)
		if err != nil {
			t.Fatalf("a leaf does not parse: %v\n%s", err, leaf)
		}
		leaf2, err := again.Leaf()
		if err != nil || !bytes.Equal(leaf, leaf2) {
			t.Fatalf("a leaf is not stable:\n%s\n%s (%v)", leaf, leaf2, err)
		}
	})
}

// FuzzParseCheckpoint: a checkpoint body that parses is written back as a
// body that parses to the same checkpoint.
func FuzzParseCheckpoint(f *testing.F) {
	f.Add("idemgate/acme\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n")
	f.Add("o\n0\n\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseCheckpoint(text)
		if err != nil {
			return
		}
		again, err := ParseCheckpoint(c.Body())
		if err != nil || again != c {
			t.Fatalf("%q: written back as %q: %+v %v", text, c.Body(), again, err)
		}
	})
}
