package contract

import "strings"

// MetaPrefix starts every mark the MCP proxy sets in a result's _meta:
// marks an upstream's own result carries under it are removed before the
// proxy adds its own, so that no server can make a fresh call look like a
// replay, or a success like a refusal.
const MetaPrefix = "io.idemgate/"

// MetaUnrecorded marks a result the store could not record within the
// recording deadline (as HeaderUnrecorded marks an HTTP answer);
// MetaNotKept a replay that stands in for a result too large to keep.
const (
	MetaUnrecorded = MetaPrefix + "unrecorded"
	MetaNotKept    = MetaPrefix + "not_kept"
)

// IsMark reports whether a _meta member is one of the proxy's marks.
func IsMark(name string) bool { return strings.HasPrefix(name, MetaPrefix) }

// TraceID reads the trace id of a W3C traceparent
// ("00-<32 hex>-<16 hex>-<2 hex>"), "" when it does not parse: as Trace
// Context asks, a trace is context, never a reason to refuse.
func TraceID(traceparent string) string {
	parts := strings.Split(strings.TrimSpace(traceparent), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || parts[0] == "ff" || len(parts[1]) != 32 || len(parts[2]) != 16 ||
		len(parts[3]) != 2 || (parts[0] == "00" && len(parts) != 4) {
		return ""
	}
	for _, p := range parts[:4] {
		if !lowerHex(p) {
			return ""
		}
	}
	if strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return ""
	}
	return parts[1]
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
