package tracing

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// redacting is the exporter every span leaves through: the HTTP
// conventions record a request's query (url.query, and url.full on the
// upstream call), where a client's own data may be (an e-mail, a search);
// idemgate's logs never hold it, and neither do its spans. The path
// stays: it is the route's.
type redacting struct{ sdktrace.SpanExporter }

// ExportSpans implements sdktrace.SpanExporter.
func (r redacting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = redacted{s}
	}
	return r.SpanExporter.ExportSpans(ctx, out)
}

// redacted is a span whose attributes hold no query.
type redacted struct{ sdktrace.ReadOnlySpan }

// Attributes implements sdktrace.ReadOnlySpan.
func (s redacted) Attributes() []attribute.KeyValue {
	attrs := s.ReadOnlySpan.Attributes()
	if !slices.ContainsFunc(attrs, hasQuery) {
		return attrs
	}
	out := make([]attribute.KeyValue, 0, len(attrs))
	for _, kv := range attrs {
		switch kv.Key {
		case semconv.URLQueryKey:
			continue
		case semconv.URLFullKey:
			u, _, _ := strings.Cut(kv.Value.AsString(), "?")
			kv = semconv.URLFull(u)
		}
		out = append(out, kv)
	}
	return out
}

// hasQuery reports whether an attribute holds a query.
func hasQuery(kv attribute.KeyValue) bool {
	return kv.Key == semconv.URLQueryKey || kv.Key == semconv.URLFullKey && strings.Contains(kv.Value.AsString(), "?")
}
