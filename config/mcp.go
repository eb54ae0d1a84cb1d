package config

import (
	"cmp"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/internal/jsonptr"
)

// MCPServer is one MCP server behind the proxy (docs/design.md,
// "MCP proxy"), served at /mcp/{name}: a stdio server the gateway starts
// (Command), or a Streamable HTTP one (URL, with Headers that stay here).
type MCPServer struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	// Env is added to a stdio server's environment (its credentials),
	// which it otherwise inherits from the gateway's.
	Env     map[string]string `yaml:"env"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds a call: one unanswered past it is unknown (30s).
	Timeout time.Duration `yaml:"timeout"`
	// Tools are the tools' own settings; a tool not named here is guarded
	// unless its annotations say readOnlyHint.
	Tools map[string]*MCPTool `yaml:"tools"`
	// Roles, if set, are the roles (one of them) a principal needs to use
	// the server at all, as a route's; Tenants, if set, the only tenants
	// whose principals may.
	Roles   []string `yaml:"roles"`
	Tenants []string `yaml:"tenants"`
	// Isolation is who shares an upstream session, and a stdio server's
	// process: tenant (the default), principal, or shared.
	Isolation string `yaml:"isolation"`
	// IsolatedIdle is how long an isolated upstream with no call in
	// flight is kept before it is stopped (10m).
	IsolatedIdle time.Duration `yaml:"isolated_idle"`

	line      int
	toolLines map[string]int
}

// MCPTool is one tool's settings: whether it is guarded, and the
// policies of its operations, as a route's.
type MCPTool struct {
	// Guard, if set, guards the tool (true) or forwards it unrecorded
	// (false), whatever its annotations say.
	Guard *bool `yaml:"guard"`
	// Roles, if set, are the roles (one of them) a principal needs to call
	// the tool, as an action's.
	Roles          []string         `yaml:"roles"`
	BusinessKey    string           `yaml:"business_key"`
	ConcurrencyKey string           `yaml:"concurrency_key"`
	Retention      time.Duration    `yaml:"retention"`
	Lease          time.Duration    `yaml:"lease"`
	Approval       *approval.Config `yaml:"approval"`
	// MaxResult bounds the result an operation keeps (default
	// max_response): a larger one is given whole to the call that ran it,
	// and a stand-in is kept (docs/design.md, "An answer too large to
	// keep").
	MaxResult Size `yaml:"max_result"`

	// Policy is Approval compiled.
	Policy        *approval.Policy `yaml:"-"`
	approvalLines map[string]int
}

// MCPSessions bound the sessions MCP clients hold of the proxy's
// Streamable HTTP front (docs/design.md, "MCP proxy"): a session holds
// its client's state until the client ends it, so these free those it
// forgot and refuse a client that opens without end.
type MCPSessions struct {
	// IdleTimeout closes a session no request used for this long (30m);
	// an open event stream is no use, a client that idles pings.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxPerPrincipal is how many sessions one principal holds at once
	// (100); Max how many the gateway holds, of everyone (10000). A new
	// one past either is refused.
	MaxPerPrincipal int `yaml:"max_per_principal"`
	Max             int `yaml:"max"`
}

// checkMCPSessions checks the session limits and fills their defaults.
func (c *Config) checkMCPSessions() error {
	s := &c.MCPSessions
	if s.IdleTimeout < 0 || s.MaxPerPrincipal < 0 || s.Max < 0 {
		return c.errorf(c.lines["mcp_sessions"], "mcp_sessions: idle_timeout, max_per_principal and max must be positive")
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = 30 * time.Minute
	}
	if s.Max == 0 {
		s.Max = 10000
	}
	if s.MaxPerPrincipal == 0 {
		s.MaxPerPrincipal = min(100, s.Max)
	}
	if s.MaxPerPrincipal > s.Max {
		return c.errorf(c.lines["mcp_sessions"], "mcp_sessions: max_per_principal (%d) is more than max (%d)",
			s.MaxPerPrincipal, s.Max)
	}
	return nil
}

// mcpName is what an MCP server may be called: a path segment and part of
// every operation's route.
var mcpName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// envName is what an environment variable of a stdio server may be called.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkMCPServers validates every MCP server and its tools.
func (c *Config) checkMCPServers() error {
	if err := c.checkMCPSessions(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range c.MCPServers {
		if s == nil {
			return fmt.Errorf("%s: an mcp_servers entry is empty", c.file)
		}
		if seen[s.Name] {
			return c.errorf(s.line, "mcp server %q is defined twice", s.Name)
		}
		seen[s.Name] = true
		if err := c.checkMCPServer(s); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) checkMCPServer(s *MCPServer) error {
	what := "mcp server " + s.Name
	switch {
	case !mcpName.MatchString(s.Name):
		return c.errorf(s.line, "mcp server %q: want a name of [a-z0-9._-], starting with a letter or digit, at most 64", s.Name)
	case (len(s.Command) == 0) == (s.URL == ""):
		return c.errorf(s.line, "%s: give either command (a stdio server) or url (a Streamable HTTP server)", what)
	case len(s.Command) > 0 && len(s.Headers) > 0:
		return c.errorf(s.line, "%s: headers go with url; a stdio server takes its credentials from its environment (env)", what)
	case s.URL != "" && len(s.Env) > 0:
		return c.errorf(s.line, "%s: env goes with command (a stdio server's environment); a url's credentials are headers", what)
	case s.Timeout < 0:
		return c.errorf(s.line, "%s: timeout must be positive", what)
	case !slices.Contains([]string{"", "tenant", "principal", "shared"}, s.Isolation):
		return c.errorf(s.line, "%s: isolation %q: want tenant (the default), principal or shared", what, s.Isolation)
	case s.IsolatedIdle < 0:
		return c.errorf(s.line, "%s: isolated_idle must be positive", what)
	case slices.Contains(s.Roles, "") || slices.Contains(s.Tenants, ""):
		return c.errorf(s.line, "%s: an empty role or tenant", what)
	}
	if s.Isolation == "" {
		s.Isolation = "tenant"
	}
	if s.IsolatedIdle == 0 {
		s.IsolatedIdle = 10 * time.Minute
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c.errorf(s.line, "%s: url %q: want http(s)://host[:port]/path", what, s.URL)
		}
	}
	if err := c.checkHeaderSet(what, s.Headers, nil, s.line); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if !envName.MatchString(k) {
			return c.errorf(s.line, "%s: env %q: want a variable name of [A-Za-z0-9_], not starting with a digit", what, k)
		}
	}
	if s.Timeout == 0 {
		s.Timeout = 30 * time.Second
	}
	for _, name := range slices.Sorted(maps.Keys(s.Tools)) {
		if err := c.checkMCPTool(s, name, s.Tools[name], cmp.Or(s.toolLines[name], s.line)); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) checkMCPTool(s *MCPServer, name string, t *MCPTool, line int) error {
	what := "mcp server " + s.Name + ": tool " + name
	switch {
	case t == nil:
		return c.errorf(line, "%s: empty; write {} for the defaults", what)
	case name == "" || len(name) > 128:
		return c.errorf(line, "%s: a tool's name is 1 to 128 characters", what)
	case t.Guard != nil && !*t.Guard && (t.Approval != nil || t.BusinessKey != "" || t.ConcurrencyKey != ""):
		return c.errorf(line, "%s: guard: false forwards it unrecorded; approval, business_key and "+
			"concurrency_key need a guarded tool", what)
	case slices.Contains(t.Roles, ""):
		return c.errorf(line, "%s: an empty role", what)
	case t.Lease < 0 || t.Retention < 0 || t.MaxResult < 0:
		return c.errorf(line, "%s: lease, retention and max_result must be positive", what)
	}
	if t.MaxResult == 0 {
		t.MaxResult = c.MaxResponse
	}
	for _, p := range []string{t.BusinessKey, t.ConcurrencyKey} {
		if toks, err := jsonptr.Parse(p); err != nil || (p != "" && len(toks) == 0) {
			return c.errorf(line, "%s: JSON pointer %q: want /member/…", what, p)
		}
	}
	if t.Approval == nil {
		return nil
	}
	var err error
	t.Policy, err = c.compileApproval(*t.Approval, line, t.approvalLines, what)
	return err
}

// MCPServer is the configured MCP server named name, or nil.
func (c *Config) MCPServer(name string) *MCPServer {
	for _, s := range c.MCPServers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// mcpLines notes where each MCP server, each of its tools and each tool's
// approval keys are defined.
func mcpLines(val *yaml.Node, servers []*MCPServer) {
	for j, n := range val.Content {
		if j >= len(servers) || servers[j] == nil {
			continue
		}
		s := servers[j]
		s.line, s.toolLines = n.Line, keyLines(n, "tools")
		tools := child(n, "tools")
		for name, t := range s.Tools {
			if t != nil && tools != nil {
				t.approvalLines = keyLines(child(tools, name), "approval")
			}
		}
	}
}

// child is the value under key in the mapping n, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
