package control

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
)

// An operator's answer is what every retry gets: one that a replay could
// not send as given is refused, with what is wrong.
func TestAnswerRefusesWhatAReplayCannotSend(t *testing.T) {
	h := func(kv ...string) map[string][]string { return map[string][]string{kv[0]: kv[1:]} }
	for name, tc := range map[string]struct {
		a    contract.Answer
		want string
	}{
		"status 42":           {contract.Answer{Status: 42}, "status 42"},
		"status 103":          {contract.Answer{Status: 103}, "final status"},
		"status 600":          {contract.Answer{Status: 600}, "status 600"},
		"over the bound":      {contract.Answer{Status: 200, Body: strings.Repeat("x", 17)}, "over max_response (16)"},
		"not UTF-8":           {contract.Answer{Status: 200, Body: "\xff"}, "UTF-8"},
		"204 with a body":     {contract.Answer{Status: 204, Body: "x"}, "no body"},
		"a name with a space": {contract.Answer{Status: 200, Headers: h("X Id", "1")}, "not a valid name"},
		"an empty name":       {contract.Answer{Status: 200, Headers: h("", "1")}, "not a valid name"},
		"a newline":           {contract.Answer{Status: 200, Headers: h("X-Id", "1\r\nSet-Cookie: a=1")}, "control character"},
		"a NUL":               {contract.Answer{Status: 200, Headers: h("X-Id", "1\x00")}, "control character"},
		"no value":            {contract.Answer{Status: 200, Headers: h("X-Id")}, "no value"},
		"Transfer-Encoding":   {contract.Answer{Status: 200, Headers: h("transfer-encoding", "chunked")}, "hop-by-hop"},
		"Connection":          {contract.Answer{Status: 200, Headers: h("Connection", "close")}, "hop-by-hop"},
		"the gateway's own":   {contract.Answer{Status: 200, Headers: h(contract.HeaderReplayed, "false")}, "gateway's own"},
		"a probe's mark":      {contract.Answer{Status: 200, Headers: h("idempotency-reconciled", "true")}, "gateway's own"},
		"an encoding":         {contract.Answer{Status: 200, Headers: h("Content-Encoding", "gzip")}, "decoded"},
		"a wrong length":      {contract.Answer{Status: 200, Body: "abc", Headers: h("Content-Length", "4")}, "3 bytes"},
		"a name given twice": {contract.Answer{Status: 200, Headers: map[string][]string{"x-id": {"1"}, "X-Id": {"2"}}},
			"given twice"},
	} {
		_, err := storedAnswer(tc.a, 16)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func TestAnswerIsStoredAsGiven(t *testing.T) {
	a := contract.Answer{Status: 201, Body: "{\"id\":\"T-9\"}\n", Headers: map[string][]string{
		"content-type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "Content-Length": {"13"}}}
	r, err := storedAnswer(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "Content-Length": {"13"}}
	if r.Status != 201 || string(r.Body) != a.Body || !reflect.DeepEqual(r.Header, want) {
		t.Fatalf("stored %d %v %q", r.Status, r.Header, r.Body)
	}
	a.Headers["Set-Cookie"][0] = "changed"
	if http.Header(r.Header).Get("Set-Cookie") != "a=1" {
		t.Fatal("the stored header shares the caller's values")
	}
	if _, err := storedAnswer(contract.Answer{Status: 200, Body: strings.Repeat("x", contract.DefaultMaxResponse+1)}, 0); err == nil {
		t.Fatal("a body over the default bound was accepted")
	}
}
