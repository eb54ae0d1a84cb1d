package drill

import (
	"strings"
	"testing"
)

const goodMCPScenario = `mcp:
  target: http://127.0.0.1:8080/mcp/tickets
  headers: {Authorization: "Bearer x"}
  tool: create_ticket
  arguments: '{"title": "drill {{.run}} {{.n}}"}'
  intent: intent
  effects: {tool: count_effects, pointer: /count}
`

// TestParseMCPScenario: a good MCP scenario is read; each mistake is
// refused with what is wrong, before any call.
func TestParseMCPScenario(t *testing.T) {
	if _, err := ParseMCPScenario("s.yaml", []byte(goodMCPScenario)); err != nil {
		t.Fatal(err)
	}
	if !IsMCPScenario([]byte(goodMCPScenario)) || IsMCPScenario([]byte("target: http://x\n")) {
		t.Fatal("IsMCPScenario")
	}
	for bad, want := range map[string]string{
		"target: http://127.0.0.1:8080/mcp/tickets":       "mcp.target",
		"tool: create_ticket":                             "mcp.tool",
		`arguments: '{"title": "drill {{.run}} {{.n}}"}'`: "mcp.arguments",
		"effects: {tool: count_effects, pointer: /count}": "mcp.effects",
	} {
		text := strings.Replace(goodMCPScenario, "  "+bad+"\n", "", 1)
		if _, err := ParseMCPScenario("s.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without %q: %v, want %q", bad, err, want)
		}
	}
}

// FuzzParseMCPScenario: whatever the file holds, a scenario accepted
// renders its arguments as JSON objects.
func FuzzParseMCPScenario(f *testing.F) {
	f.Add([]byte(goodMCPScenario))
	f.Add([]byte("mcp: {target: 'http://h/mcp', tool: t, arguments: '{\"n\":{{.n}}}', effects: {get: 'http://h/e'}}\n"))
	f.Add([]byte("mcp: 5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseMCPScenario("fuzz.yaml", data)
		if err != nil {
			return
		}
		if _, err := s.arguments(3, "r"); err != nil {
			t.Fatalf("accepted, but the arguments do not render: %v", err)
		}
	})
}
