package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLS is tls (and metrics_tls): the listener's certificate and key
// (PEM files), and, with client_ca, the CAs whose client certificates are
// required. The files are read again when they change (checked at most
// once a second), so a certificate is rotated without a restart.
type TLS struct {
	Cert     string `yaml:"cert"`
	Key      string `yaml:"key"`
	ClientCA string `yaml:"client_ca"`

	line  int
	files *tlsFiles
}

// checkTLS loads tls and metrics_tls once, so that a missing file or a
// key that does not match its certificate stops the start, at its line.
func (c *Config) checkTLS() error {
	if c.MetricsTLS != nil && c.MetricsListen == "" {
		return c.errorf(c.MetricsTLS.line, "metrics_tls: it is metrics_listen's, and metrics_listen is not set")
	}
	for _, t := range []*TLS{c.TLS, c.MetricsTLS} {
		if t == nil {
			continue
		}
		if t.Cert == "" || t.Key == "" {
			return c.errorf(t.line, "tls: cert and key are both required")
		}
		t.files = &tlsFiles{cert: c.relative(t.Cert), key: c.relative(t.Key), ca: c.relative(t.ClientCA), now: c.now,
			setting: "tls"}
		if t == c.MetricsTLS {
			t.files.setting = "metrics_tls"
		}
		if err := t.files.load(); err != nil {
			return c.errorf(t.line, "tls: %v", err)
		}
	}
	return nil
}

// ListenerTLS is the listener's TLS configuration; nil without tls.
func (c *Config) ListenerTLS() *tls.Config { return c.TLS.server() }

// MetricsListenerTLS is metrics_listen's TLS configuration: metrics_tls,
// or tls; nil without either.
func (c *Config) MetricsListenerTLS() *tls.Config {
	if c.MetricsTLS != nil {
		return c.MetricsTLS.server()
	}
	return c.TLS.server()
}

func (t *TLS) server() *tls.Config {
	if t == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return t.files.current(), nil }}
}

// ObserveTLS has the listeners' TLS files (tls, metrics_tls) report
// each rotation: applied, or refused (the files in hand kept), logged on
// log and told to counted (the metrics), so that a rotation that did not
// take is seen before the old certificate expires. Call it before
// serving.
func (c *Config) ObserveTLS(log *slog.Logger, counted func(setting string, err error)) {
	for _, t := range []*TLS{c.TLS, c.MetricsTLS} {
		if t != nil && t.files != nil {
			t.files.hook.Store(&tlsHook{log: log, counted: counted})
		}
	}
}

// tlsHook is what hears a listener's rotations.
type tlsHook struct {
	log     *slog.Logger
	counted func(setting string, err error)
}

// tlsFiles is one listener's certificate, key and client CAs, as their
// files last read well: a rotation half written (a new certificate, the
// old key) keeps the previous configuration until the pair matches.
type tlsFiles struct {
	cert, key, ca string
	setting       string // tls or metrics_tls, as the log and the metrics name it
	now           func() time.Time
	hook          atomic.Pointer[tlsHook]

	cfg     atomic.Pointer[tls.Config]
	checked atomic.Int64 // unix nanoseconds of the last look at the files
	mu      sync.Mutex   // one reader of the files at a time
	stamps  []os.FileInfo
	// refused are the files of the last rotation refused: the same files
	// are not read, logged and counted again every second.
	refused []os.FileInfo
}

// current is the configuration for a new handshake, the files looked at
// again if a second has passed.
func (f *tlsFiles) current() *tls.Config {
	now := f.now().UnixNano()
	if last := f.checked.Load(); now-last < int64(time.Second) || !f.checked.CompareAndSwap(last, now) {
		return f.cfg.Load()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if stamps := f.changed(); stamps != nil {
		f.rotate(stamps)
	}
	return f.cfg.Load()
}

// rotate reads the files again: a bad rotation keeps the configuration
// in hand. Either way it is logged and counted.
func (f *tlsFiles) rotate(stamps []os.FileInfo) {
	err := f.load()
	if err != nil {
		f.refused = stamps
	}
	h := f.hook.Load()
	if h == nil {
		return
	}
	h.counted(f.setting, err)
	if err != nil {
		h.log.Error("TLS files not reloaded: the previous certificate and client CAs are kept",
			slog.String("setting", f.setting), slog.String("error", err.Error()))
		return
	}
	attrs := []slog.Attr{slog.String("setting", f.setting), slog.String("cert", f.cert)}
	if leaf := f.cfg.Load().Certificates[0].Leaf; leaf != nil {
		attrs = append(attrs, slog.String("subject", leaf.Subject.String()), slog.Time("not_after", leaf.NotAfter))
	}
	h.log.LogAttrs(context.Background(), slog.LevelInfo, "TLS files reloaded", attrs...)
}

// changed returns the files' stamps if one was replaced or written since
// it was read, and they are not those of a rotation already refused; nil
// otherwise.
func (f *tlsFiles) changed() []os.FileInfo {
	stamps := make([]os.FileInfo, 0, 3)
	for _, path := range f.paths() {
		st, err := os.Stat(path)
		if err != nil {
			return nil // mid-rotation: look again later
		}
		stamps = append(stamps, st)
	}
	if sameFiles(stamps, f.stamps) || sameFiles(stamps, f.refused) {
		return nil
	}
	return stamps
}

// sameFiles reports whether two looks at the files saw the same ones,
// unwritten since.
func sameFiles(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size() {
			return false
		}
	}
	return true
}

func (f *tlsFiles) paths() []string {
	if f.ca == "" {
		return []string{f.cert, f.key}
	}
	return []string{f.cert, f.key, f.ca}
}

// load reads the files and makes the configuration; on an error the one
// in hand stays.
func (f *tlsFiles) load() error {
	var stamps []os.FileInfo
	for _, path := range f.paths() {
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		stamps = append(stamps, st)
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return fmt.Errorf("cert %s, key %s: %w", f.cert, f.key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair},
		NextProtos: []string{"http/1.1"}}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("client_ca " + f.ca + ": no PEM certificate in it")
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	f.cfg.Store(cfg)
	f.stamps = stamps
	return nil
}
