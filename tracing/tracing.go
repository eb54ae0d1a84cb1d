// Package tracing is idemgate's OpenTelemetry traces (docs/design.md,
// "Identity, transport and operations"): a span for each request (HTTP
// server semantic conventions, otelhttp), one for each ledger step of the
// keyed write path (Store, a decorator of the store the gateway is given),
// and one for each upstream call (HTTP client conventions, otelhttp), whose
// traceparent the upstream receives.
//
// Spans carry the operation's id and state, its route, its tenant and
// whether the answer was replayed; never the key, a body, a token or a
// query (the conventions' url.query and url.full are redacted). They
// are exported over OTLP as the standard OTEL_* variables say, and only
// when OTEL_TRACES_EXPORTER or an OTLP endpoint is set: otherwise FromEnv
// returns nil, whose methods wrap nothing, so a gateway without traces
// runs the very code it ran before they existed.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/contract"
)

// The attributes idemgate adds to the conventions' (http.route is the
// conventions' own).
const (
	AttrOperation = attribute.Key("idemgate.operation.id")
	AttrState     = attribute.Key("idemgate.operation.state")
	AttrTenant    = attribute.Key("idemgate.tenant")
	AttrReplayed  = attribute.Key("idemgate.replayed")
	AttrRoute     = semconv.HTTPRouteKey
)

// Tracing is a running tracer provider and its exporter. A nil *Tracing
// is tracing off: each method returns what it was given.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Enabled reports whether OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT asks for traces (and
// OTEL_SDK_DISABLED does not forbid them).
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	return exp != "" && exp != "none" ||
		exp == "" && (os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
}

// FromEnv starts tracing as the OTEL_* variables say, or returns nil
// (tracing off) when they ask for none. The exporter reads its endpoint,
// headers, timeout and compression from them; the batch processor its
// pace (OTEL_BSP_*); the sampler OTEL_TRACES_SAMPLER; the resource
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name is
// idemgate unless they say otherwise). Call Shutdown at the end.
func FromEnv(ctx context.Context, version string) (*Tracing, error) {
	if !Enabled() {
		return nil, nil
	}
	if exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp != "" && exp != "otlp" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: idemgate exports traces over OTLP only (otlp or none)", exp)
	}
	exporter, err := newExporter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("idemgate"),
		semconv.ServiceVersion(version)), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return New(sdktrace.NewTracerProvider(sdktrace.WithBatcher(redacting{exporter}), sdktrace.WithResource(res))), nil
}

// newExporter is the OTLP exporter of OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
// (or OTEL_EXPORTER_OTLP_PROTOCOL): http/protobuf by default, or grpc.
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: want http/protobuf or grpc", proto)
}

// New is tracing with a provider of the caller's (a test's, with its own
// exporter). Its spans propagate as W3C trace context.
func New(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{tp: tp, tracer: tp.Tracer("github.com/idemgate/idemgate"), prop: propagation.TraceContext{}}
}

// Tracer is the tracer of spans beside the HTTP ones (the MCP proxy's
// tool calls); nil when tracing is off.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// Flush exports the spans queued so far, and returns once they are.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown exports the spans still queued and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

func (t *Tracing) options() []otelhttp.Option {
	return []otelhttp.Option{otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.prop),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // the metrics are Prometheus'
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method })}
}

// requestSpan marks the request's span in its context: the ledger steps
// name it by the operation's route and add its attributes (Store).
type requestSpan struct{}

// Handler traces each request of h: a server span, continuing the
// caller's trace (traceparent), named "METHOD" and, once a ledger step
// has named the route, "METHOD /route"; its attributes are the
// conventions', and the operation's (id, state, route, tenant, replayed).
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	annotated := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context())
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestSpan{}, span)))
		if id := w.Header().Get(contract.HeaderOperation); id != "" {
			span.SetAttributes(AttrOperation.String(id),
				AttrReplayed.Bool(w.Header().Get(contract.HeaderReplayed) == "true"))
		}
	})
	return otelhttp.NewHandler(annotated, "idemgate", t.options()...)
}

// Transport traces each call through rt: a client span, and the
// traceparent header the upstream reads.
func (t *Tracing) Transport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	return otelhttp.NewTransport(rt, t.options()...)
}
