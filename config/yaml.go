package config

import (
	"go.yaml.in/yaml/v3"
)

// This file keeps each setting's line for the errors that name it
// (internal/yamlfile reads the YAML itself).

// recordLines notes where each upstream, principal and route is defined.
func recordLines(root *yaml.Node, cfg *Config) {
	doc := root.Content[0]
	cfg.lines = map[string]int{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		key, val := doc.Content[i].Value, doc.Content[i+1]
		cfg.lines[key] = doc.Content[i].Line
		switch key {
		case "upstreams":
			for j := 0; j+1 < len(val.Content); j += 2 {
				if u := cfg.Upstreams[val.Content[j].Value]; u != nil {
					u.line, u.headerLines = val.Content[j].Line, keyLines(val.Content[j+1], "headers")
				}
			}
		case "principals":
			for j, n := range val.Content {
				if j < len(cfg.Principals) && cfg.Principals[j] != nil {
					cfg.Principals[j].line = n.Line
				}
			}
		case "auth":
			if cfg.Auth.JWT != nil {
				cfg.Auth.JWT.line = keyLine(val, "jwt", doc.Content[i].Line)
				cfg.Auth.JWT.keys = keyLines(val, "jwt")
			}
		case "tls":
			if cfg.TLS != nil {
				cfg.TLS.line = doc.Content[i].Line
			}
		case "metrics_tls":
			if cfg.MetricsTLS != nil {
				cfg.MetricsTLS.line = doc.Content[i].Line
			}
		case "audit":
			if cfg.Audit != nil {
				cfg.Audit.line = doc.Content[i].Line
			}
		case "limits":
			cfg.Limits.lines = limitLines(doc.Content[i].Line, val)
		case "actions":
			for j, n := range val.Content {
				if j < len(cfg.Actions) && cfg.Actions[j] != nil {
					cfg.Actions[j].line, cfg.Actions[j].approvalLines = n.Line, keyLines(n, "approval")
				}
			}
		case "relay":
			if cfg.Relay != nil {
				cfg.Relay.line = doc.Content[i].Line
			}
		case "consumers":
			for j, n := range val.Content {
				if j < len(cfg.Consumers) && cfg.Consumers[j] != nil {
					cfg.Consumers[j].line = n.Line
				}
			}
		case "mcp_servers":
			mcpLines(val, cfg.MCPServers)
		case "routes":
			for j, n := range val.Content {
				if j < len(cfg.Routes) && cfg.Routes[j] != nil {
					cfg.Routes[j].line, cfg.Routes[j].approvalLines = n.Line, keyLines(n, "approval")
					cfg.Routes[j].webhookLines = keyLines(n, "webhook")
				}
			}
		}
	}
}

// keyLine is the line of key in mapping n, or def.
func keyLine(n *yaml.Node, key string, def int) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return def
}
