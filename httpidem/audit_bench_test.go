package httpidem_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// BenchmarkReplayAudit is a replay from the replay cache with the audit
// log's events recorded (through a real batcher into a real store) and
// without, side by side: what the audit log costs a replay's path.
func BenchmarkReplayAudit(b *testing.B) {
	s := dbtest.SQLite(b)
	for _, audited := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[audited], func(b *testing.B) {
			opts := httpidem.Options{Store: s, Tenant: func(*http.Request) (string, error) { return "acme", nil },
				Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/services/{service}/deployments"}}}
			if audited {
				batcher := ledger.NewEventBatcher(s, 0, nil)
				defer batcher.Close()
				opts.Audit = batcher
			}
			m, err := httpidem.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			key, body := "bench-"+time.Now().Format("150405.000000000"), `{"artifact":"a","environment":"staging"}`
			if code := serveOnce(h, key, body); code != 201 {
				b.Fatalf("first: %d", code)
			}
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if code := serveOnce(h, key, body); code != 201 {
						b.Errorf("replay: %d", code)
						return
					}
				}
			})
		})
	}
}
