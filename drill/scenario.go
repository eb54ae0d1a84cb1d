package drill

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/template"

	"cel.dev/cel-go/cel"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/internal/yamlfile"
)

// Scenario is a drill's YAML file (DESIGN.md, "idemgate drill"): the
// target, its write, how it expresses idempotency, and how to count its
// effects. Credentials come from the environment (${TOKEN}).
type Scenario struct {
	Target  string            `yaml:"target"`
	Headers map[string]string `yaml:"headers"`
	Write   struct {
		Method string `yaml:"method"`
		Path   string `yaml:"path"`
		// Body is a text/template over .n (distinct for each action) and
		// .run (this drill's), so that distinct actions differ.
		Body string `yaml:"body"`
	} `yaml:"write"`
	Idempotency struct {
		Header string `yaml:"header"` // e.g. Idempotency-Key
		Body   string `yaml:"body"`   // a JSON Pointer the key is written at
		None   bool   `yaml:"none"`   // the target has no idempotency of its own
	} `yaml:"idempotency"`
	Effects struct {
		// Get is a path on the target, or a URL of its own (the API behind
		// a gateway that does not route it).
		Get   string `yaml:"get"`   // e.g. /v1/effects
		Count string `yaml:"count"` // CEL over status, headers, body: e.g. body.tickets_created
	} `yaml:"effects"`
	// Status, if set, reads an operation's status: a path template over
	// .key (e.g. /_idem/v1/operations?key={{.key}}).
	Status         string `yaml:"status"`
	BusinessKey    string `yaml:"business_key"`    // a JSON Pointer into the body
	ConcurrencyKey string `yaml:"concurrency_key"` // a JSON Pointer into the body

	file  string
	lines map[string]int // each top-level key's line
	body  *template.Template
	count cel.Program
	state *template.Template
}

// LoadScenario reads and checks a scenario file; every mistake is an
// error naming the file and the line.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return ParseScenario(path, data)
}

// ParseScenario is LoadScenario on data already read.
func ParseScenario(name string, data []byte) (*Scenario, error) {
	s := &Scenario{file: name, lines: map[string]int{}}
	root, err := yamlfile.Decode(name, data, s)
	if err != nil {
		return nil, err
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		s.lines[doc.Content[i].Value] = keyLine(doc.Content[i], doc.Content[i+1])
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// keyLine is where a setting is written: its value's line for a scalar.
func keyLine(key, val *yaml.Node) int {
	if val.Kind == yaml.ScalarNode {
		return val.Line
	}
	return key.Line
}

func (s *Scenario) errorf(key, format string, args ...any) error {
	line := s.lines[key]
	if line == 0 {
		line = 1
	}
	return fmt.Errorf("%s:%d: %s", s.file, line, fmt.Sprintf(format, args...))
}

// check validates everything a drill depends on, before any request.
func (s *Scenario) check() error {
	u, err := url.Parse(s.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s.errorf("target", "target %q: want http(s)://host[:port]", s.Target)
	}
	for name, v := range s.Headers {
		if !validHeader(name, v) {
			return s.errorf("headers", "header %q: not a valid HTTP field (a name token; a value without CR, LF, NUL)", name)
		}
	}
	if err := s.checkWrite(); err != nil {
		return err
	}
	if err := s.checkIdempotency(); err != nil {
		return err
	}
	if err := s.checkEffects(); err != nil {
		return err
	}
	for key, ptr := range map[string]string{"business_key": s.BusinessKey, "concurrency_key": s.ConcurrencyKey} {
		if toks, err := jsonptr.Parse(ptr); ptr != "" && (err != nil || len(toks) == 0) {
			return s.errorf(key, "%s %q: want a JSON Pointer into the body, /field", key, ptr)
		}
	}
	if s.Status != "" {
		if s.state, err = template.New("status").Option("missingkey=error").Parse(s.Status); err != nil ||
			!strings.HasPrefix(s.Status, "/") {
			return s.errorf("status", "status %q: want a path template over .key: %v", s.Status, err)
		}
	}
	return nil
}

func validHeader(name, v string) bool {
	if name == "" || strings.ContainsAny(v, "\r\n\x00") {
		return false
	}
	for _, c := range name {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

func (s *Scenario) checkWrite() error {
	w := &s.Write
	switch {
	case w.Method != http.MethodPost && w.Method != http.MethodPut && w.Method != http.MethodPatch &&
		w.Method != http.MethodDelete:
		return s.errorf("write", "write.method %q: want POST, PUT, PATCH or DELETE", w.Method)
	case !strings.HasPrefix(w.Path, "/"):
		return s.errorf("write", "write.path %q: want a path, /v1/…", w.Path)
	}
	t, err := template.New("body").Option("missingkey=error").Parse(w.Body)
	if err != nil {
		return s.errorf("write", "write.body: %v", err)
	}
	s.body = t
	// Two distinct actions must differ, or the checks cannot tell them
	// apart: the body must name .n.
	one, err := s.Body(1, "r")
	if err == nil {
		var two []byte
		if two, err = s.Body(2, "r"); err == nil && bytes.Equal(one, two) {
			err = fmt.Errorf("it renders the same for two actions: name {{.n}} in it")
		}
	}
	if err != nil {
		return s.errorf("write", "write.body: %v", err)
	}
	return nil
}

func (s *Scenario) checkIdempotency() error {
	i := s.Idempotency
	set := 0
	for _, on := range []bool{i.Header != "", i.Body != "", i.None} {
		if on {
			set++
		}
	}
	switch {
	case set != 1:
		return s.errorf("idempotency", "idempotency: name exactly one of header, body or none: true")
	case i.Header != "" && !validHeader(i.Header, ""):
		return s.errorf("idempotency", "idempotency.header %q: not a header name", i.Header)
	case i.Body != "":
		if toks, err := jsonptr.Parse(i.Body); err != nil || len(toks) == 0 {
			return s.errorf("idempotency", "idempotency.body %q: want a JSON Pointer, /field", i.Body)
		}
	}
	return nil
}

func (s *Scenario) checkEffects() error {
	g := s.Effects.Get
	if !strings.HasPrefix(g, "/") && !strings.HasPrefix(g, "http://") && !strings.HasPrefix(g, "https://") ||
		s.Effects.Count == "" {
		return s.errorf("effects", "effects: want get: /path (or a URL) and count: a CEL expression over its answer")
	}
	env, err := cel.NewEnv(cel.Variable("status", cel.IntType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.ListType(cel.StringType))),
		cel.Variable("body", cel.DynType))
	if err != nil {
		return err
	}
	ast, iss := env.Compile(s.Effects.Count)
	if iss.Err() != nil {
		return s.errorf("effects", "effects.count: %v", iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.IntType) && !t.IsExactType(cel.DoubleType) &&
		!t.IsExactType(cel.DynType) && !t.IsExactType(cel.UintType) {
		return s.errorf("effects", "effects.count: must be a number, not %s", t)
	}
	if s.count, err = env.Program(ast, cel.CostLimit(1_000_000)); err != nil {
		return s.errorf("effects", "effects.count: %v", err)
	}
	return nil
}

// Body renders the write's body for the n-th distinct action of run.
func (s *Scenario) Body(n int, run string) ([]byte, error) {
	var b bytes.Buffer
	if err := s.body.Execute(&b, map[string]any{"n": n, "run": run}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Count reads the effect count from the effects resource's answer.
func (s *Scenario) Count(status int, header http.Header, body []byte) (int64, error) {
	var doc any
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &doc); err != nil {
			return 0, fmt.Errorf("effects: the answer is not JSON: %w", err)
		}
	}
	out, _, err := s.count.Eval(map[string]any{"status": status, "headers": map[string][]string(header), "body": doc})
	if err != nil {
		return 0, fmt.Errorf("effects.count: %w", err)
	}
	switch v := out.Value().(type) {
	case int64:
		return v, nil
	case uint64:
		return int64(v), nil
	case float64:
		if v == float64(int64(v)) {
			return int64(v), nil
		}
	}
	return 0, fmt.Errorf("effects.count: %v is not a whole number", out.Value())
}
