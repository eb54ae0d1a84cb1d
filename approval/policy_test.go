package approval

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// request is a typical deploy request; tests change what they need.
func request() Input {
	return Input{
		Method: "POST",
		Path:   "/v1/services/api/deployments",
		Params: map[string]string{"service": "api"},
		Query:  map[string][]string{"dry_run": {"true"}},
		Body: map[string]any{
			"environment": "production",
			"artifact":    "api:1.4.2",
			"amount":      json.Number("5000"),
			"tags":        []any{"a", "b"},
			"nested":      map[string]any{"limit": json.Number("7")},
		},
		Headers:   map[string]string{"X-Region": "eu"},
		Principal: Principal{Name: "ada", Tenant: "acme", Roles: []string{"deployer", "admin"}},
	}
}

func mustCompile(t testing.TB, c Config) *Policy {
	t.Helper()
	p, err := Compile(c)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", c, err)
	}
	return p
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config Config
		prefix string // the field the error must name
		detail string // part of the message
	}{
		{"syntax", Config{When: `body.environment ==`}, "when: ", "Syntax error"},
		{"unknown variable", Config{When: `environment == "production"`}, "when: ", "undeclared reference to 'environment'"},
		{"unknown principal field", Config{When: `principal.role == "x"`}, "when: ", "undefined field 'role'"},
		{"non-bool int", Config{When: `1 + 2`}, "when: ", "must be bool, not int"},
		{"non-bool string", Config{When: `params.service`}, "when: ", "must be bool, not string"},
		{"unknown function", Config{When: `frob(body)`}, "when: ", "undeclared reference to 'frob'"},
		{"bad template", Config{Summary: `Deploy {{.body.artifact`}, "summary: ", "unclosed action"},
		{"unknown template function", Config{Summary: `{{frob .body}}`}, "summary: ", `"frob" not defined`},
		{"template recursion", Config{Summary: `{{define "x"}}{{template "x"}}{{end}}{{template "x"}}`}, "summary: ", "not allowed"},
		{"range over number", Config{Summary: `{{range 1000000000}}{{end}}`}, "summary: ", "range over a number"},
		{"nested range", Config{Summary: `{{range .body.tags}}{{range $.body.tags}}{{end}}{{end}}`}, "summary: ", "range within range"},
		{"negative ttl", Config{TTL: -time.Second}, "ttl: ", "negative"},
		{"negative valid_for", Config{ValidFor: -time.Second}, "valid_for: ", "negative"},
		{"empty role", Config{Approvers: []string{"approver", ""}}, "approvers: ", "empty role"},
		{"blank role", Config{Approvers: []string{" "}}, "approvers: ", "empty role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Compile(tc.config)
			if err == nil {
				t.Fatalf("Compile = %v, want an error", p)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.prefix) || !strings.Contains(msg, tc.detail) {
				t.Fatalf("error %q, want prefix %q and %q", msg, tc.prefix, tc.detail)
			}
		})
	}
}

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		name string
		when string
		edit func(*Input)
		want bool
	}{
		{"empty when", "", nil, true},
		{"blank when", "  \n", nil, true},
		{"body true", `body.environment == "production"`, nil, true},
		{"body false", `body.environment == "production"`, func(in *Input) { in.Body.(map[string]any)["environment"] = "staging" }, false},
		{"nested body", `body.nested.limit == 7`, nil, true},
		{"list in body", `'b' in body.tags`, nil, true},
		{"method and path", `method == "POST" && path.startsWith("/v1/services/")`, nil, true},
		{"params", `params.service == "api"`, nil, true},
		{"params false", `params.service == "web"`, nil, false},
		{"params absent", `has(params.service)`, func(in *Input) { in.Params = nil }, false},
		{"query", `'true' in query.dry_run`, nil, true},
		{"query absent", `'dry_run' in query && 'true' in query.dry_run`, func(in *Input) { in.Query = nil }, false},
		{"headers", `headers["X-Region"] == "eu"`, nil, true},
		{"role", `'admin' in principal.roles`, nil, true},
		{"role absent", `'admin' in principal.roles`, func(in *Input) { in.Principal.Roles = nil }, false},
		{"principal name and tenant", `principal.name == "ada" && principal.tenant == "acme"`, nil, true},
		{"strings extension", `body.artifact.split(':')[0].upperAscii() == "API"`, nil, true},
		{"dyn result", `body.approve`, func(in *Input) { in.Body.(map[string]any)["approve"] = true }, true},

		// Numbers: the body holds json.Number, CEL sees int, uint or double.
		{"int above", `body.amount > 1000`, nil, true},
		{"int is int", `type(body.amount) == int && body.amount == 5000`, nil, true},
		{"int below", `body.amount > 1000`, func(in *Input) { setAmount(in, "999") }, false},
		{"negative int", `body.amount == -3`, func(in *Input) { setAmount(in, "-3") }, true},
		{"double above", `body.amount > 1000`, func(in *Input) { setAmount(in, "1000.5") }, true},
		{"double is double", `type(body.amount) == double`, func(in *Input) { setAmount(in, "1000.5") }, true},
		{"exponent is double", `type(body.amount) == double && body.amount == 1000`, func(in *Input) { setAmount(in, "1e3") }, true},
		{"double below", `body.amount > 1000`, func(in *Input) { setAmount(in, "999.5") }, false},
		{"int64 max is int", `type(body.amount) == int`, func(in *Input) { setAmount(in, "9223372036854775807") }, true},
		{"beyond int64 is uint", `type(body.amount) == uint && body.amount > 1000`, func(in *Input) { setAmount(in, "9223372036854775808") }, true},
		{"uint64 max is uint", `body.amount == 18446744073709551615u`, func(in *Input) { setAmount(in, "18446744073709551615") }, true},
		{"beyond uint64 is double", `type(body.amount) == double && body.amount > 1000`, func(in *Input) { setAmount(in, "123456789012345678901") }, true},
		{"below int64 is double", `type(body.amount) == double && body.amount < -1000`, func(in *Input) { setAmount(in, "-9223372036854775809") }, true},
		{"int against double literal", `body.amount > 999.5`, nil, true},
		{"double against uint literal", `body.amount < 1001u`, func(in *Input) { setAmount(in, "1000.5") }, true},
		{"literals cross type", `1 < 1.5 && 2u > 1 && 3.0 >= 3`, nil, true},
		{"number in list", `body.limits.exists(x, x > 2.5)`, func(in *Input) {
			in.Body.(map[string]any)["limits"] = []any{json.Number("1"), json.Number("3")}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, Config{When: tc.when})
			in := request()
			if tc.edit != nil {
				tc.edit(&in)
			}
			got, err := p.Required(in)
			if err != nil {
				t.Fatalf("Required: %v", err)
			}
			if got != tc.want {
				t.Fatalf("Required = %v, want %v", got, tc.want)
			}
		})
	}
}

func setAmount(in *Input, n string) { in.Body.(map[string]any)["amount"] = json.Number(n) }

func TestRequiredErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		when   string
		body   any
		detail string
	}{
		{"missing field", `body.environment == "production"`, map[string]any{"env": "secret-value"}, "no such key: environment"},
		{"nil body", `body.environment == "production"`, nil, "environment"},
		{"non-bool result", `body.environment`, map[string]any{"environment": "secret-value"}, "result is string, not bool"},
		{"type mismatch", `body.environment > 3`, map[string]any{"environment": "secret-value"}, "no such overload"},
		{"cost limit", `[0,1,2,3,4,5,6,7,8,9].all(a, [0,1,2,3,4,5,6,7,8,9].all(b, [0,1,2,3,4,5,6,7,8,9].all(c,
			[0,1,2,3,4,5,6,7,8,9].all(d, [0,1,2,3,4,5,6,7,8,9].all(e, [0,1,2,3,4,5,6,7,8,9].all(f,
			[0,1,2,3,4,5,6,7,8,9].all(g, [0,1,2,3,4,5,6,7,8,9].all(h, a+b+c+d+e+f+g+h >= 0))))))))`, nil, "cost limit exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, Config{When: tc.when})
			in := request()
			in.Body = tc.body
			got, err := p.Required(in)
			if err == nil {
				t.Fatalf("Required = %v, nil; want an error", got)
			}
			if got {
				t.Errorf("Required = true alongside error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "approval.when: ") || !strings.Contains(msg, tc.detail) {
				t.Fatalf("error %q, want prefix %q and %q", msg, "approval.when: ", tc.detail)
			}
			if strings.Contains(msg, "secret-value") {
				t.Fatalf("error %q shows a body value", msg)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		name     string
		template string
		edit     func(*Input)
		want     string
	}{
		{"values", `Deploy {{.body.artifact}} to {{.body.environment}} ({{.params.service}})`, nil, "Deploy api:1.4.2 to production (api)"},
		{"numbers as written", `{{.body.amount}} {{.body.nested.limit}} {{.body.big}} {{.body.frac}}`, func(in *Input) {
			in.Body.(map[string]any)["big"] = json.Number("123456789012345678901")
			in.Body.(map[string]any)["frac"] = json.Number("1.50")
		}, "5000 7 123456789012345678901 1.50"},
		{"request", `{{.method}} {{.path}} {{index .query.dry_run 0}} {{index .headers "X-Region"}}`, nil, "POST /v1/services/api/deployments true eu"},
		{"principal", `by {{.principal.name}}@{{.principal.tenant}} {{index .principal.roles 1}}`, nil, "by ada@acme admin"},
		{"range", `{{range $i, $t := .body.tags}}{{if $i}},{{end}}{{$t}}{{end}}`, nil, "a,b"},
		{"empty template", "", nil, "POST /v1/x"},
		{"blank template", " \n", nil, "POST /v1/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, Config{Summary: tc.template})
			in := request()
			if tc.template == "" || strings.TrimSpace(tc.template) == "" {
				in.Path = "/v1/x"
			}
			if tc.edit != nil {
				tc.edit(&in)
			}
			got, err := p.Summary(in)
			if err != nil {
				t.Fatalf("Summary: %v", err)
			}
			if got != tc.want {
				t.Fatalf("Summary = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSummaryMissingKey(t *testing.T) {
	for _, tc := range []struct {
		name     string
		template string
		edit     func(*Input)
	}{
		{"body field", `{{.body.version}}`, nil},
		{"nested body field", `{{.body.nested.nope}}`, nil},
		{"params lacks key", `{{.params.region}}`, nil},
		{"params nil", `{{.params.service}}`, func(in *Input) { in.Params = nil }},
		{"headers nil", `{{.headers.x}}`, func(in *Input) { in.Headers = nil }},
		{"query nil", `{{.query.dry_run}}`, func(in *Input) { in.Query = nil }},
		{"body nil", `{{.body.artifact}}`, func(in *Input) { in.Body = nil }},
		{"unknown top-level", `{{.user}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, Config{Summary: tc.template})
			in := request()
			if tc.edit != nil {
				tc.edit(&in)
			}
			got, err := p.Summary(in)
			if err == nil {
				t.Fatalf("Summary = %q, nil; want an error", got)
			}
			if !strings.HasPrefix(err.Error(), "approval.summary: ") {
				t.Fatalf("error %q lacks the prefix", err)
			}
		})
	}
}

func TestSummaryTruncated(t *testing.T) {
	for _, tc := range []struct {
		name     string
		template string
		value    string
		path     string
	}{
		{"ascii", `{{.body.artifact}}`, strings.Repeat("a", 5000), ""},
		{"multibyte at the cut", `x{{.body.artifact}}`, strings.Repeat("€", 2000), ""}, // 3-byte runes, offset by one
		{"four-byte runes", `{{.body.artifact}}`, strings.Repeat("😀", 1000), ""},
		{"range stops early", `{{range .body.tags}}{{.}}{{end}}`, "", ""},
		{"default summary", ``, "", "/v1/" + strings.Repeat("é", 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, Config{Summary: tc.template})
			in := request()
			body := in.Body.(map[string]any)
			body["artifact"] = tc.value
			tags := make([]any, 100_000)
			for i := range tags {
				tags[i] = "tag"
			}
			body["tags"] = tags
			if tc.path != "" {
				in.Path = tc.path
			}
			got, err := p.Summary(in)
			if err != nil {
				t.Fatalf("Summary: %v", err)
			}
			if len(got) > maxSummary || len(got) < maxSummary-utf8.UTFMax-len("…") {
				t.Fatalf("len = %d, want just under %d", len(got), maxSummary)
			}
			if !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
				t.Fatalf("Summary = %q…%q: not valid UTF-8 ending in an ellipsis", got[:10], got[len(got)-10:])
			}
		})
	}

	t.Run("exactly the limit is kept", func(t *testing.T) {
		p := mustCompile(t, Config{Summary: `{{.body.artifact}}`})
		in := request()
		want := strings.Repeat("b", maxSummary)
		in.Body.(map[string]any)["artifact"] = want
		if got, err := p.Summary(in); err != nil || got != want {
			t.Fatalf("Summary = %d bytes, %v; want %d bytes unchanged", len(got), err, len(want))
		}
	})
}

func TestDefaults(t *testing.T) {
	p := mustCompile(t, Config{})
	if p.TTL() != DefaultTTL || p.ValidFor() != DefaultTTL {
		t.Errorf("TTL, ValidFor = %v, %v; want %v, %v", p.TTL(), p.ValidFor(), DefaultTTL, DefaultTTL)
	}
	if !slices.Equal(p.Approvers(), DefaultApprovers) {
		t.Errorf("Approvers = %v, want %v", p.Approvers(), DefaultApprovers)
	}
	if p.Reversible() {
		t.Errorf("Reversible = true by default")
	}
	if ok, err := p.Required(request()); !ok || err != nil {
		t.Errorf("Required = %v, %v; want true, nil", ok, err)
	}

	// valid_for follows ttl unless set.
	p = mustCompile(t, Config{TTL: time.Hour})
	if p.TTL() != time.Hour || p.ValidFor() != time.Hour {
		t.Errorf("TTL, ValidFor = %v, %v; want 1h, 1h", p.TTL(), p.ValidFor())
	}
	p = mustCompile(t, Config{TTL: time.Hour, ValidFor: time.Minute, Approvers: []string{"sre", "lead"}, Reversible: true})
	if p.TTL() != time.Hour || p.ValidFor() != time.Minute || !slices.Equal(p.Approvers(), []string{"sre", "lead"}) || !p.Reversible() {
		t.Errorf("got %v %v %v %v", p.TTL(), p.ValidFor(), p.Approvers(), p.Reversible())
	}

	// The policy keeps its own copies of the role lists.
	roles := []string{"sre"}
	p = mustCompile(t, Config{Approvers: roles})
	roles[0] = "changed"
	p.Approvers()[0] = "changed"
	if got := p.Approvers(); !slices.Equal(got, []string{"sre"}) {
		t.Errorf("Approvers = %v after callers changed their slices", got)
	}
}

func TestConcurrent(t *testing.T) {
	p := mustCompile(t, Config{
		When:    `body.environment == "production" && body.amount > 1000 && 'admin' in principal.roles`,
		Summary: `Deploy {{.body.artifact}} to {{.body.environment}} ({{.params.service}})`,
	})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				in := request()
				env := "production"
				if (g+i)%2 == 1 {
					env = "staging"
				}
				in.Body.(map[string]any)["environment"] = env
				ok, err := p.Required(in)
				if err != nil || ok != (env == "production") {
					errs <- fmt.Errorf("Required(%s) = %v, %v", env, ok, err)
					return
				}
				s, err := p.Summary(in)
				if want := "Deploy api:1.4.2 to " + env + " (api)"; err != nil || s != want {
					errs <- fmt.Errorf("Summary = %q, %v; want %q", s, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTypeConfusionIsRefused: a field the policy compares with a literal
// must have the literal's type. CEL's equality would say a list (as a form
// body makes every field) or a number is simply not "production", and the
// write would run unapproved; it is refused instead.
func TestTypeConfusionIsRefused(t *testing.T) {
	for _, when := range []string{`body.environment == "production"`, `"production" == body.environment`,
		`body["environment"] != "staging"`, `body.environment in ["production", "prod"]`,
		`body.target.environment == "production" || false`} {
		p, err := Compile(Config{When: when})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		for _, body := range []string{`{"environment":["production"],"target":{"environment":["production"]}}`,
			`{"environment":5,"target":{"environment":5}}`, `{"environment":{"a":1},"target":{"environment":true}}`} {
			_, err := p.Required(Input{Body: parseBody(t, body)})
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("%s over %s: %v, want a refusal", when, body, err)
			}
		}
		ok := parseBody(t, `{"environment":"production","target":{"environment":"production"}}`)
		if _, err := p.Required(Input{Body: ok}); err != nil {
			t.Errorf("%s over strings: %v", when, err)
		}
	}
	p, _ := Compile(Config{When: `body.amount > 1000 && body.currency == "EUR"`})
	if req, err := p.Required(Input{Body: parseBody(t, `{"amount":5000,"currency":"EUR"}`)}); err != nil || !req {
		t.Fatalf("numbers and strings: %v %v", req, err)
	}
	if _, err := p.Required(Input{Body: parseBody(t, `{"amount":5000,"currency":["EUR"]}`)}); err == nil {
		t.Fatal("a list currency passed")
	}
}

// parseBody parses a body as the middleware does, numbers as json.Number.
func parseBody(t *testing.T, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestArgsIsTheBody: an MCP tool's policy reads the call's arguments as
// args, in `when` (with the guards against type confusion) and in the
// summary, as a route's reads its body.
func TestArgsIsTheBody(t *testing.T) {
	p := mustCompile(t, Config{When: `args.environment == "production"`, Summary: "Deploy {{.args.artifact}}"})
	if req, err := p.Required(request()); err != nil || !req {
		t.Fatalf("args.environment over a production deploy: %v %v", req, err)
	}
	if s, err := p.Summary(request()); err != nil || s != "Deploy api:1.4.2" {
		t.Fatalf("summary %q, %v", s, err)
	}
	if _, err := p.Required(Input{Body: parseBody(t, `{"environment":["production"]}`)}); err == nil {
		t.Fatal("a list environment passed args' guard")
	}
}
