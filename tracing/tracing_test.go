package tracing

import (
	"context"
	"net/http"
	"testing"
)

// TestOffUnlessAsked: tracing is on only when OTEL_TRACES_EXPORTER or an
// OTLP endpoint asks for it, and off it wraps nothing at all.
func TestOffUnlessAsked(t *testing.T) {
	for _, c := range []struct {
		env map[string]string
		on  bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
			t.Setenv(k, c.env[k])
		}
		tr, err := FromEnv(context.Background(), "test")
		if err != nil || (tr != nil) != c.on || Enabled() != c.on {
			t.Errorf("%v: %v %v", c.env, tr, err)
		}
		if tr != nil {
			_ = tr.Shutdown(context.Background())
		}
	}
	var off *Tracing
	h, rt := &handler{}, &http.Transport{}
	if off.Handler(h) != http.Handler(h) || off.Transport(rt) != http.RoundTripper(rt) || off.Store(nil) != nil ||
		off.Observer() != nil {
		t.Fatal("tracing off wraps")
	}
}

// TestBadSettingsAreRefused: an exporter or a protocol idemgate does not
// have is an error at start-up, not traces silently lost.
func TestBadSettingsAreRefused(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := FromEnv(context.Background(), "test"); err == nil {
		t.Fatal("OTEL_TRACES_EXPORTER=zipkin accepted")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := FromEnv(context.Background(), "test"); err == nil {
		t.Fatal("OTEL_EXPORTER_OTLP_PROTOCOL=http/json accepted")
	}
}

type handler struct{}

func (*handler) ServeHTTP(http.ResponseWriter, *http.Request) {}
