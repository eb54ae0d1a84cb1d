package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Errors is an upstream's errors setting (docs/design.md, "Error
// shapes"): the form its clients expect errors in, for every refusal on
// its routes. It is a name, problem (the default) or stripe, or a template
// of the upstream's own:
//
//	errors: stripe
//	errors: {template: '{"errors":[{"code":{{json .Code}}}]}', media_type: application/json}
type Errors struct {
	Name      string `yaml:"-"`
	Template  string `yaml:"template"`
	MediaType string `yaml:"media_type"` // of a template's body: application/json by default

	shape contract.Shape // nil: problem
}

// UnmarshalYAML reads a name or a template's mapping.
func (e *Errors) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		e.Name = n.Value
		return nil
	}
	type fields Errors // without this method
	return n.Decode((*fields)(e))
}

// checkErrors builds an upstream's shape, refusing a name it does not know
// and a template that does not render (or, for a JSON media type, does
// not render JSON).
func (c *Config) checkErrors(name string, u *Upstream) error {
	e := &u.Errors
	switch {
	case e.Template != "" && e.Name != "":
		return c.errorf(u.line, "upstream %q: errors: a name or a template, not both", name)
	case e.Template != "":
		s, err := newTemplateShape(e.Template, e.MediaType)
		if err != nil {
			return c.errorf(u.line, "upstream %q: errors: template: %v", name, err)
		}
		e.shape = s
	case e.MediaType != "":
		return c.errorf(u.line, "upstream %q: errors: media_type goes with a template", name)
	case e.Name == "stripe":
		e.shape = contract.StripeShape
	case e.Name != "" && e.Name != "problem":
		return c.errorf(u.line, "upstream %q: errors: %q: want problem, stripe, or {template: …}", name, e.Name)
	}
	return nil
}

// templateShape writes a problem with an operator's template.
type templateShape struct {
	t     *template.Template
	media string
}

// shapeData is what a template reads: the problem's members, and DocURL.
type shapeData struct {
	Type, Title, Detail, Code             string
	OperationID, State, StatusURL, DocURL string
	Status, RetryAfter                    int
	Retryable                             bool
}

// newTemplateShape parses text, and renders it for two sample problems
// (one naming an operation, one not): a template that fails, or that does
// not make JSON for a JSON media type, is refused at start-up, not met on
// a refusal.
func newTemplateShape(text, media string) (*templateShape, error) {
	if media == "" {
		media = "application/json"
	}
	if _, _, err := mime.ParseMediaType(media); err != nil {
		return nil, fmt.Errorf("media_type %q: %v", media, err)
	}
	t, err := template.New("errors").Option("missingkey=error").Funcs(template.FuncMap{"json": jsonValue}).Parse(text)
	if err != nil {
		return nil, err
	}
	s := &templateShape{t: t, media: media}
	unknown := contract.NewProblem(contract.CodeOutcomeUnknown, "a \"quoted\" detail <&>").
		For(&ledger.Operation{ID: "op_1", State: ledger.Unknown}, contract.ControlPrefix)
	for _, p := range []*contract.Problem{unknown, contract.NewProblem(contract.CodeNotFound, "")} {
		body, err := s.render(p)
		if err != nil {
			return nil, err
		}
		if isJSON(media) && !json.Valid(body) {
			return nil, fmt.Errorf("it renders %s, which is not JSON (media_type %s); write strings with {{json .Detail}}",
				body, media)
		}
	}
	return s, nil
}

// Render implements contract.Shape; a template that fails (it rendered
// its samples at start-up) leaves the problem in RFC 9457's shape.
func (s *templateShape) Render(h http.Header, p *contract.Problem) []byte {
	body, err := s.render(p)
	if err != nil {
		return contract.ProblemShape.Render(h, p)
	}
	h.Set("Content-Type", s.media)
	return body
}

func (s *templateShape) render(p *contract.Problem) ([]byte, error) {
	var b bytes.Buffer
	err := s.t.Execute(&b, shapeData{Type: p.Type, Title: p.Title, Detail: p.Detail, Code: p.Code,
		OperationID: p.OperationID, State: string(p.State), StatusURL: p.StatusURL, DocURL: contract.DocURL,
		Status: p.Status, RetryAfter: p.RetryAfter, Retryable: contract.Retryable(p.Code)})
	return b.Bytes(), err
}

// jsonValue is a template's json function: v as a JSON value.
func jsonValue(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// isJSON reports whether a media type is JSON (application/json, or any
// */*+json).
func isJSON(media string) bool {
	m, _, _ := mime.ParseMediaType(media)
	return m == "application/json" || strings.HasSuffix(m, "+json")
}

// Shape is how refusals are written on this upstream's routes (nil:
// RFC 9457's problem).
func (e *Errors) Shape() contract.Shape { return e.shape }
