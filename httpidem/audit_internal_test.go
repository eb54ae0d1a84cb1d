package httpidem

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgate/idemgate/contract"
)

// FuzzRequestContext: whatever an agent sends as Idempotency-Run and
// traceparent, the run kept is printable text within its bound (or the
// request is refused), and the trace id is 32 lowercase hex digits, not
// all zero, or none.
func FuzzRequestContext(f *testing.F) {
	f.Add("run-1", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("", "00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Add("a\u0085b", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
	f.Fuzz(func(t *testing.T, run, traceparent string) {
		r := &http.Request{Header: http.Header{}}
		r.Header.Set(contract.HeaderRun, run)
		r.Header.Set(contract.HeaderTraceparent, traceparent)
		got, p := runOf(r)
		if p == nil && (len(got) > contract.MaxRunLen || !utf8.ValidString(got) || strings.IndexFunc(got, notPrintable) >= 0) {
			t.Fatalf("run %q kept as %q", run, got)
		}
		if trace := traceOf(r); trace != "" && (len(trace) != 32 || strings.Trim(trace, "0123456789abcdef") != "" || strings.Trim(trace, "0") == "") {
			t.Fatalf("traceparent %q gave trace %q", traceparent, trace)
		}
	})
}

// TestTraceparent: W3C Trace Context's examples, good and bad.
func TestTraceparent(t *testing.T) {
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       "4bf92f3577b34da6a3ce929d0e0e4736",
		"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what":  "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": "",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       "",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":       "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":       "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":       "",
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01":        "",
		"": "",
	} {
		r := &http.Request{Header: http.Header{}}
		r.Header.Set(contract.HeaderTraceparent, tp)
		if got := traceOf(r); got != want {
			t.Errorf("%q: %q, want %q", tp, got, want)
		}
	}
}
