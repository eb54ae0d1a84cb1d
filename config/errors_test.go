package config

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
)

// TestErrorsSetting: an upstream's errors setting is a known name or a
// template that renders (JSON, for a JSON media type); anything else is
// refused at start-up, at the upstream's line.
func TestErrorsSetting(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	with := func(setting string) (*Config, error) {
		text := strings.Replace(goodConfig, "    forward_key: true\n", "    forward_key: true\n    errors: "+setting+"\n", 1)
		return Parse("gw.yaml", []byte(text))
	}
	for setting, want := range map[string]contract.Shape{"problem": nil, "stripe": contract.StripeShape} {
		cfg, err := with(setting)
		if err != nil || cfg.Upstreams["ops"].Errors.shape != want {
			t.Fatalf("%s: %v", setting, err)
		}
	}
	cfg, err := with(`{template: '{"error":{{json .Code}},"op":{{json .OperationID}}}'}`)
	if err != nil {
		t.Fatal(err)
	}
	p := contract.NewProblem(contract.CodeOutcomeUnknown, "lost")
	p.OperationID = "op_\"1"
	h := map[string][]string{}
	if body := cfg.Upstreams["ops"].Errors.shape.Render(h, p); string(body) != `{"error":"outcome_unknown","op":"op_\"1"}` ||
		h["Content-Type"][0] != "application/json" {
		t.Fatalf("template rendered %s, %v", body, h)
	}
	for setting, msg := range map[string]string{
		"graphql":                                              `gw.yaml:4: upstream "ops": errors: "graphql": want problem, stripe, or {template: …}`,
		`{template: '{"error": {{.Detail}}}'}`:                 "which is not JSON (media_type application/json)",
		`{template: '{{.Nope}}'}`:                              "can't evaluate field Nope",
		`{template: '{{json'}`:                                 "errors: template:",
		`{template: 'x', media_type: 'text/'}`:                 "media_type",
		`{media_type: application/json}`:                       "media_type goes with a template",
		`{template: "{}", surprise: 1}`:                        `unknown key "surprise"`,
		`{template: 'code={{.Code}}', media_type: text/plain}`: "",
	} {
		_, err := with(setting)
		if msg == "" && err != nil || msg != "" && (err == nil || !strings.Contains(err.Error(), msg)) {
			t.Errorf("%s: %v, want %q", setting, err, msg)
		}
	}
}
