package drill

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/template"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types/ref"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/inbox/webhook"
	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/internal/yamlfile"
)

// Scenario is a drill's YAML file (docs/design.md, "idemgate drill"): the
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
	// Status, if set, reads an operation's status by its key.
	Status struct {
		// Get is a path on the target (or a URL) as a template over .key,
		// e.g. /_idem/v1/operations?key={{.key}}.
		Get string `yaml:"get"`
		// State is CEL over status, headers, body giving the state's name
		// (succeeded, unknown, …); body.state by default.
		State string `yaml:"state"`
	} `yaml:"status"`
	BusinessKey    string `yaml:"business_key"`    // a JSON Pointer into the body
	ConcurrencyKey string `yaml:"concurrency_key"` // a JSON Pointer into the body
	// Webhook, if set, makes each write a signed webhook delivery
	// (docs/design.md, "Inbox: messages and webhooks"): the drill signs
	// it as the scheme's sender does, when it sends it, and wf-10 sends
	// one event several times, re-signed each time. The key goes where
	// the scheme reads it (idempotency may be left out).
	Webhook struct {
		Scheme string `yaml:"scheme"` // standard, stripe or github
		Secret string `yaml:"secret"` // e.g. ${HOOK_SECRET}
	} `yaml:"webhook"`

	file  string
	lines map[string]int // each setting's line, by its dotted path (write.method)
	body  *template.Template
	count cel.Program
	where *template.Template // Status.Get
	state cel.Program
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
	noteLines(s.lines, "", root.Content[0])
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// noteLines records where each setting of the mapping n is written, by
// its dotted path: its value's line for a scalar, its key's otherwise.
func noteLines(lines map[string]int, prefix string, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		path := prefix + key.Value
		lines[path] = key.Line
		if val.Kind == yaml.ScalarNode {
			lines[path] = val.Line
		}
		noteLines(lines, path+".", val)
	}
}

// errorf is an error at the line of the setting key (a dotted path), or
// of the nearest setting around it that is written.
func (s *Scenario) errorf(key, format string, args ...any) error {
	line := s.lines[key]
	for line == 0 && strings.Contains(key, ".") {
		key = key[:strings.LastIndex(key, ".")]
		line = s.lines[key]
	}
	if line == 0 {
		line = 1
	}
	return fmt.Errorf("%s:%d: %s", s.file, line, fmt.Sprintf(format, args...))
}

// MaxHeaders bounds a scenario's headers: more is no API's client, and
// each is sent with every request.
const MaxHeaders = 100

// check validates everything a drill depends on, before any request.
func (s *Scenario) check() error {
	u, err := url.Parse(s.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s.errorf("target", "target %q: want http(s)://host[:port]", s.Target)
	}
	if len(s.Headers) > MaxHeaders {
		return s.errorf("headers", "headers: %d of them; a scenario sends at most %d", len(s.Headers), MaxHeaders)
	}
	for name, v := range s.Headers {
		if !validHeader(name, v) {
			return s.errorf("headers."+name, "header %q: not a valid HTTP field (a name token; a value without CR, LF, NUL)", name)
		}
	}
	for _, step := range []func() error{s.checkWrite, s.checkWebhook, s.checkIdempotency, s.checkEffects, s.checkStatus} {
		if err := step(); err != nil {
			return err
		}
	}
	for key, ptr := range map[string]string{"business_key": s.BusinessKey, "concurrency_key": s.ConcurrencyKey} {
		if toks, err := jsonptr.Parse(ptr); ptr != "" && (err != nil || len(toks) == 0) {
			return s.errorf(key, "%s %q: want a JSON Pointer into the body, /field", key, ptr)
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
		return s.errorf("write.method", "write.method %q: want POST, PUT, PATCH or DELETE", w.Method)
	case !strings.HasPrefix(w.Path, "/"):
		return s.errorf("write.path", "write.path %q: want a path, /v1/…", w.Path)
	}
	t, err := template.New("body").Option("missingkey=error").Parse(w.Body)
	if err != nil {
		return s.errorf("write.body", "write.body: %v", err)
	}
	s.body = t
	// Two distinct actions must differ, or the checks cannot tell them
	// apart: the body must name .n.
	one, err := s.Body(1, "r")
	if err == nil {
		var two []byte
		if two, err = s.Body(2, "r"); err == nil && bytes.Equal(one, two) {
			err = fmt.Errorf("it renders the same for two actions: name {{.n}} in it")
		} else if err == nil && !json.Valid(one) {
			err = fmt.Errorf("it does not render JSON: %.60s", one)
		}
	}
	if err != nil {
		return s.errorf("write.body", "write.body: %v", err)
	}
	return nil
}

// checkWebhook checks the webhook's scheme and secret (the sender's: a
// Standard Webhooks whsk_ private key signs v1a), and puts the key where the scheme reads it unless idempotency
// says so itself; idempotency naming another place is a mistake (the
// deliveries would carry no key their receiver reads).
func (s *Scenario) checkWebhook() error {
	w := s.Webhook
	if w.Scheme == "" && w.Secret == "" {
		return nil
	}
	if strings.TrimSpace(w.Secret) == "" {
		return s.errorf("webhook", "webhook: the secret is empty: the sender's signing secret (an unset variable?)")
	}
	if _, err := webhook.Sign(w.Scheme, w.Secret, "drill", time.Now(), nil); err != nil {
		return s.errorf("webhook", "webhook: %v", err)
	}
	kind, where, _ := strings.Cut(webhook.KeyOf(w.Scheme), ":")
	i := &s.Idempotency
	switch {
	case i.Header == "" && i.Body == "" && !i.None && kind == "header":
		i.Header = where
	case i.Header == "" && i.Body == "" && !i.None:
		i.Body = where
	case kind == "header" && !strings.EqualFold(i.Header, where), kind == "body" && i.Body != where:
		return s.errorf("idempotency", "idempotency: a %s webhook's key is its %s %s", w.Scheme, kind, where)
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
		return s.errorf("idempotency.header", "idempotency.header %q: not a header name", i.Header)
	case i.Body != "":
		if toks, err := jsonptr.Parse(i.Body); err != nil || len(toks) == 0 {
			return s.errorf("idempotency.body", "idempotency.body %q: want a JSON Pointer, /field", i.Body)
		}
	}
	return nil
}

// answerEnv is the CEL environment of expressions over an answer.
func answerEnv() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("status", cel.IntType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.ListType(cel.StringType))),
		cel.Variable("body", cel.DynType))
}

// compile compiles expr (the setting key) over an answer, to one of want.
func (s *Scenario) compile(key, expr string, want ...*cel.Type) (cel.Program, error) {
	env, err := answerEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, s.errorf(key, "%s: %v", key, iss.Err())
	}
	if t := ast.OutputType(); !slices.ContainsFunc(want, t.IsExactType) && !t.IsExactType(cel.DynType) {
		return nil, s.errorf(key, "%s: must be a %s, not %s", key, want[0], t)
	}
	prg, err := env.Program(ast, cel.CostLimit(1_000_000))
	if err != nil {
		return nil, s.errorf(key, "%s: %v", key, err)
	}
	return prg, nil
}

func isURLOrPath(g string) bool {
	return strings.HasPrefix(g, "/") || strings.HasPrefix(g, "http://") || strings.HasPrefix(g, "https://")
}

func (s *Scenario) checkEffects() error {
	if !isURLOrPath(s.Effects.Get) {
		return s.errorf("effects.get", "effects.get %q: want a path on the target, /v1/effects (or a URL)", s.Effects.Get)
	}
	if s.Effects.Count == "" {
		return s.errorf("effects", "effects.count: want a CEL expression over the answer, e.g. size(body) or body.count")
	}
	var err error
	s.count, err = s.compile("effects.count", s.Effects.Count, cel.IntType, cel.DoubleType, cel.UintType)
	return err
}

func (s *Scenario) checkStatus() error {
	st := &s.Status
	if st.Get == "" && st.State == "" {
		return nil
	}
	t, err := template.New("status").Option("missingkey=error").Parse(st.Get)
	if err == nil && !isURLOrPath(st.Get) {
		err = fmt.Errorf("want a path on the target (or a URL)")
	}
	if err == nil {
		s.where = t
		var one, two string
		if one, err = s.StatusURL("k1"); err == nil {
			if two, err = s.StatusURL("k2"); err == nil && one == two {
				err = fmt.Errorf("it renders the same for two keys: name {{.key}} in it")
			}
		}
	}
	if err != nil {
		return s.errorf("status.get", "status.get %q: %v", st.Get, err)
	}
	if st.State == "" {
		st.State = "body.state"
	}
	s.state, err = s.compile("status.state", st.State, cel.StringType)
	return err
}

// Body renders the write's body for the n-th distinct action of run,
// within the bounds of render.
func (s *Scenario) Body(n int, run string) ([]byte, error) {
	return render(s.body, map[string]any{"n": n, "run": run})
}

// StatusURL renders where the status of key's operation is read, the key
// escaped as a URL's query or path needs it.
func (s *Scenario) StatusURL(key string) (string, error) {
	b, err := render(s.where, map[string]any{"key": url.QueryEscape(key)})
	return string(b), err
}

// eval runs prg over an answer.
func eval(prg cel.Program, status int, header http.Header, body []byte) (ref.Val, error) {
	var doc any
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &doc); err != nil {
			return nil, fmt.Errorf("the answer is not JSON: %w", err)
		}
	}
	out, _, err := prg.Eval(map[string]any{"status": status, "headers": map[string][]string(header), "body": doc})
	return out, err
}

// Count reads the effect count from the effects resource's answer.
func (s *Scenario) Count(status int, header http.Header, body []byte) (int64, error) {
	out, err := eval(s.count, status, header, body)
	if err != nil {
		return 0, fmt.Errorf("effects.count: %w%s", err, countHint(body))
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

// countHint says what a count that failed on an answer could be instead:
// an expression written for another API's effects resource (the
// reference API's body.tickets_created against a list) fails with CEL's
// own words, which do not say what to write.
func countHint(body []byte) string {
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	switch v := doc.(type) {
	case []any:
		return fmt.Sprintf("; the answer is a JSON list of %d items: to count them, write count: 'size(body)'", len(v))
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.Sort(names)
		return fmt.Sprintf("; the answer is a JSON object with members %s: count one of them (count: "+
			"'body.NAME'), or the items of a list (count: 'size(body.NAME)')", strings.Join(names, ", "))
	}
	return ""
}

// State reads an operation's state from the status resource's answer.
func (s *Scenario) State(status int, header http.Header, body []byte) (string, error) {
	out, err := eval(s.state, status, header, body)
	if err != nil {
		return "", fmt.Errorf("status.state: %w", err)
	}
	v, ok := out.Value().(string)
	if !ok {
		return "", fmt.Errorf("status.state: %v is not a string", out.Value())
	}
	return v, nil
}
