package mcpproxy

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestLineGuardStandsInForTheOversizedAnswer: a line over the bound is
// handed on as the proxy's stand-in for the call it answered, whichever
// place its id has (the Go SDK writes it first, the TypeScript SDK last)
// and whatever its strings hold; every other line goes on as it came.
func TestLineGuardStandsInForTheOversizedAnswer(t *testing.T) {
	huge := strings.Repeat("x", 300)
	for _, tc := range []struct {
		line string
		id   string // "" for no stand-in
	}{
		{`{"jsonrpc":"2.0","id":7,"result":{"text":"` + huge + `"}}`, `7`},
		{`{"result":{"text":"` + huge + `","id":9},"jsonrpc":"2.0","id":"a\"b"}`, `"a\"b"`},
		{`{"result":{"text":"\"id\":3,` + huge + `"}, "id" : 12 }`, `12`},
		{`{"method":"notifications/progress","params":{"text":"` + huge + `"}}`, ``},
	} {
		small := `{"jsonrpc":"2.0","id":1,"result":{}}`
		out, err := io.ReadAll(newLineGuard(strings.NewReader(small+"\n"+tc.line+"\n"+small+"\n"), 200))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(out), "\n")
		if len(lines) != 4 || lines[0] != small || lines[2] != small {
			t.Fatalf("%.40s: %q", tc.line, out)
		}
		var msg struct {
			ID    json.RawMessage
			Error struct{ Code int }
		}
		switch err := json.Unmarshal([]byte(lines[1]), &msg); {
		case tc.id == "" && lines[1] != "":
			t.Errorf("%.40s: a stand-in with no id to answer: %s", tc.line, lines[1])
		case tc.id != "" && (err != nil || string(msg.ID) != tc.id || msg.Error.Code != codeTooLarge):
			t.Errorf("%.40s: %s", tc.line, lines[1])
		}
	}
}
