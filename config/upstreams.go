package config

import (
	"fmt"
	"net/url"
	"time"
)

// Upstream is an API behind the gateway, with the credentials the gateway
// adds for it.
type Upstream struct {
	URL        string            `yaml:"url"`
	Timeout    time.Duration     `yaml:"timeout"`
	Headers    map[string]string `yaml:"headers"`
	ForwardKey bool              `yaml:"forward_key"`
	HonoursKey bool              `yaml:"honours_key"`
	// MaxConns sizes the idle connection pool to the expected concurrency.
	MaxConns int `yaml:"max_conns"`
	// Errors is the shape of every refusal on this upstream's routes, the
	// form its own clients read errors in (docs/design.md, "Error shapes").
	Errors Errors `yaml:"errors"`

	line        int
	headerLines map[string]int // each header's own line
	target      *url.URL
}

func (c *Config) checkUpstream(name string, u *Upstream) error {
	if u == nil {
		return fmt.Errorf("%s: upstream %q is empty", c.file, name)
	}
	t, err := url.Parse(u.URL)
	if err != nil || (t.Scheme != "http" && t.Scheme != "https") || t.Host == "" {
		return c.errorf(u.line, "upstream %q: url %q: want http(s)://host[:port][/prefix]", name, u.URL)
	}
	u.target = t
	if u.HonoursKey && !u.ForwardKey {
		// Re-sending an unknown operation is safe only because the upstream
		// sees the same key and deduplicates: without the key, a second effect.
		return c.errorf(u.line, "upstream %q: honours_key needs forward_key: true", name)
	}
	if err := c.checkHeaders(name, u); err != nil {
		return err
	}
	if err := c.checkErrors(name, u); err != nil {
		return err
	}
	if u.Timeout <= 0 {
		u.Timeout = 30 * time.Second
	}
	if u.MaxConns <= 0 {
		u.MaxConns = 64
	}
	return nil
}

// Target is the upstream's URL, parsed.
func (u *Upstream) Target() *url.URL { return u.target }
