package drill

import (
	"net/http"
	"strings"
	"testing"
)

// A count that does not fit the answer says what to write instead: the
// reference API's body.tickets_created against an API whose effects
// resource is a list (json-server's /tickets) is size(body); against an
// object, its members are named. The general form, size(body), counts a
// list's items.
func TestCountSaysWhatToWrite(t *testing.T) {
	t.Setenv("DRILL_TOKEN", "s3cret")
	s, err := ParseScenario("drill.yaml", []byte(goodScenario))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Count(200, http.Header{}, []byte(`[{"id":1},{"id":2}]`))
	if err == nil || !strings.Contains(err.Error(), "a JSON list of 2 items") ||
		!strings.Contains(err.Error(), "count: 'size(body)'") {
		t.Errorf("a list: %v", err)
	}
	_, err = s.Count(200, http.Header{}, []byte(`{"created":3,"deleted":1}`))
	if err == nil || !strings.Contains(err.Error(), "members created, deleted") {
		t.Errorf("an object without the member: %v", err)
	}
	general, err := ParseScenario("drill.yaml", []byte(strings.Replace(goodScenario, "'body.tickets_created'",
		"'size(body)'", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := general.Count(200, http.Header{}, []byte(`[{"id":1},{"id":2}]`)); err != nil || n != 2 {
		t.Errorf("size(body): %d %v", n, err)
	}
}
