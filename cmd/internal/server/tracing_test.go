package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/tracing"
)

// receiver is an OTLP/HTTP trace receiver: it keeps the bytes it was
// sent and the spans they decode to.
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	raw   bytes.Buffer
	spans []*tracepb.Span
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("the exporter sent %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Error(err)
				return
			}
			body = zr
		}
		data, _ := io.ReadAll(body)
		var req collector.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			t.Errorf("not an ExportTraceServiceRequest: %v", err)
		}
		rc.mu.Lock()
		rc.raw.Write(data)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// attrs are a span's attributes, as text.
func attrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = strconv.FormatBool(v.BoolValue)
		}
	}
	return out
}

// TestTraces: with an OTLP endpoint set, a keyed write and its replay
// are exported as the conventions say: a server span named by the route
// with the operation's attributes, a span per ledger step beneath it, a
// client span for the upstream call whose traceparent the upstream read;
// and neither the key, the token, the body, the query nor the upstream's
// credential is anywhere in the exported bytes.
func TestTraces(t *testing.T) {
	rc := newReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.srv.URL)
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	traces, err := tracing.FromEnv(context.Background(), "test")
	if err != nil || traces == nil {
		t.Fatalf("tracing on: %v %v", traces, err)
	}
	db := dbtest.SQLiteDB(t)
	e := newEnvWith(t, db.Open(t), db.DSN, "", nil, server.WithTracing(traces))
	const key, body = "KEY-SECRET-7f3a", `{"marker":"BODY-MARKER-91c2"}`
	first := e.do("POST", "/v1/tickets?email=QUERY-MARKER-5d1e", "agent-token", body, "Idempotency-Key", key)
	replay := e.do("POST", "/v1/tickets?email=QUERY-MARKER-5d1e", "agent-token", body, "Idempotency-Key", key)
	if first.status != 201 || replay.status != 201 || e.up.count("/v1/tickets") != 1 {
		t.Fatalf("%d, %d, %d effects", first.status, replay.status, e.up.count("/v1/tickets"))
	}
	parent := e.up.lastHeaders().Get("Traceparent")
	if err := traces.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, secret := range []string{key, "agent-token", "BODY-MARKER-91c2", "upstream-secret", "QUERY-MARKER-5d1e"} {
		if bytes.Contains(rc.raw.Bytes(), []byte(secret)) {
			t.Errorf("the exported spans hold %q", secret)
		}
	}
	op := first.header.Get("Idempotency-Operation")
	var servers []*tracepb.Span
	byID := map[string]*tracepb.Span{}
	for _, s := range rc.spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			servers = append(servers, s)
		}
	}
	if len(servers) != 2 {
		t.Fatalf("%d server spans, want 2", len(servers))
	}
	for i, want := range []string{"false", "true"} {
		s, a := servers[i], attrs(servers[i])
		if s.Name != "POST /v1/tickets" || a["http.route"] != "/v1/tickets" || a["idemgate.operation.id"] != op ||
			a["idemgate.operation.state"] != "succeeded" || a["idemgate.tenant"] != "acme" ||
			a["idemgate.replayed"] != want || a["http.response.status_code"] != "201" {
			t.Errorf("request %d: %s %v", i, s.Name, a)
		}
	}
	steps := map[string]bool{}
	var client *tracepb.Span
	for _, s := range rc.spans {
		switch {
		case strings.HasPrefix(s.Name, "ledger."):
			if p := byID[hex.EncodeToString(s.ParentSpanId)]; p == nil || p.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("%s is not a request's child", s.Name)
			}
			if attrs(s)["idemgate.operation.id"] != op {
				t.Errorf("%s: %v", s.Name, attrs(s))
			}
			steps[s.Name] = true
		case s.Kind == tracepb.Span_SPAN_KIND_CLIENT:
			client = s
		}
	}
	if !steps["ledger.Reserve"] || !steps["ledger.Complete"] {
		t.Errorf("ledger steps %v", steps)
	}
	if client == nil || !bytes.Equal(client.TraceId, servers[0].TraceId) {
		t.Fatalf("no client span in the first request's trace: %v", client)
	}
	want := "00-" + hex.EncodeToString(client.TraceId) + "-" + hex.EncodeToString(client.SpanId) + "-01"
	if parent != want {
		t.Errorf("the upstream read traceparent %q, want the client span's %q", parent, want)
	}
}
