package audit

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// BenchmarkVerifyMillion verifies an export of 1,000,000 events with a
// checkpoint every 1,000, streaming: the issue asks for under 10 s on this
// machine, in bounded memory. Run with -benchtime 1x.
func BenchmarkVerifyMillion(b *testing.B) {
	const n, every = 1_000_000, 1000
	s, v := keys(&testing.T{}, "idemgate-bench")
	path := filepath.Join(b.TempDir(), "million.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := NewWriter(f)
	var fr Frontier
	var signed [][]byte
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for i := range n {
		e := Event{Seq: int64(i), At: at.Add(time.Duration(i) * time.Microsecond), Tenant: "acme",
			OperationID: "op_01M8XSFAA7V3WHCA02SHW5ZR2R", Kind: Succeeded, Principal: "agent", RunID: "run-1",
			Key: "task-42/create-ticket", Fingerprint: "sha256:4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b",
			Route: "POST /v1/tickets", Target: "POST /v1/tickets", From: "executing", To: "succeeded",
			UpstreamStatus: 201, ResultRef: "T-1", Actor: "gateway:vm"}
		if err := w.Event(e); err != nil {
			b.Fatal(err)
		}
		h, _ := e.LeafHash()
		fr.Append(h)
		if fr.Size()%every == 0 {
			c, err := Checkpoint{Origin: "idemgate-bench/acme", Size: fr.Size(), Root: fr.Root()}.Sign(s)
			if err != nil {
				b.Fatal(err)
			}
			signed = append(signed, c)
		}
	}
	for _, c := range signed {
		if err := w.Checkpoint(c); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil || f.Close() != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		rep, err := Verify(path, v)
		if err != nil || rep.Events != n {
			b.Fatalf("%+v %v", rep, err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(after.HeapInuse)/(1<<20), "heap-MiB")
}
