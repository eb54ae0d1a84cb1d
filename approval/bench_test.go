package approval

import (
	"encoding/json"
	"testing"
)

// benchInput is a typical request: a five-field body.
func benchInput() Input {
	return Input{
		Method: "POST",
		Path:   "/v1/services/api/deployments",
		Params: map[string]string{"service": "api"},
		Body: map[string]any{
			"environment": "production",
			"artifact":    "api:1.4.2",
			"replicas":    json.Number("3"),
			"canary":      true,
			"reason":      "weekly release",
		},
		Principal: Principal{Name: "ada", Tenant: "acme", Roles: []string{"deployer"}},
	}
}

func BenchmarkWhen(b *testing.B) {
	p := mustCompile(b, Config{When: `body.environment == "production"`})
	in := benchInput()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := p.Required(in); !ok || err != nil {
			b.Fatalf("Required = %v, %v", ok, err)
		}
	}
}

func BenchmarkSummary(b *testing.B) {
	p := mustCompile(b, Config{Summary: `Deploy {{.body.artifact}} to {{.body.environment}} ({{.params.service}})`})
	in := benchInput()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Summary(in); err != nil {
			b.Fatal(err)
		}
	}
}
