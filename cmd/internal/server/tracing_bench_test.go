package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/tracing"
)

// unlimited lifts the limits: the benchmark measures the requests, not
// the limiter refusing them.
const unlimited = "limits: {default: {rate: \"0\", max_live: 0, max_stored: 0}}\n"

var benchKeys atomic.Int64

// BenchmarkTracing is what traces cost a request, in this process's
// CPU, side by side: a replay (one span) and a new key (the request's,
// two ledger steps', the upstream call's), through a gateway without
// tracing and one exporting every span to a local OTLP receiver, each
// benchmark's spans flushed within its time.
//
//	go test -run '^$' -bench Tracing -benchtime 3000x -count 5 ./cmd/internal/server
func BenchmarkTracing(b *testing.B) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer receiver.Close()
	os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	traces, err := tracing.FromEnv(context.Background(), "bench")
	os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	if err != nil {
		b.Fatal(err)
	}
	defer traces.Shutdown(context.Background())
	for _, build := range []struct {
		name string
		t    *tracing.Tracing
	}{{"off", nil}, {"on", traces}} {
		db := dbtest.SQLiteDB(b)
		e := newEnvWith(b, db.Open(b), db.DSN, unlimited, nil, server.WithTracing(build.t))
		h := e.g.Handler()
		send := func(key string) {
			req := httptest.NewRequest("POST", "/v1/tickets", strings.NewReader(`{"title":"bench"}`))
			req.Header.Set("Authorization", "Bearer agent-token")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 201 {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
		send("replayed")
		b.Run("replay/"+build.name, func(b *testing.B) {
			for b.Loop() {
				send("replayed")
			}
			_ = build.t.Flush(context.Background())
		})
		b.Run("new-key/"+build.name, func(b *testing.B) {
			for b.Loop() {
				send(fmt.Sprintf("new-%d", benchKeys.Add(1)))
			}
			_ = build.t.Flush(context.Background())
		})
	}
}
