package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/reconcile"
)

// snapshot is one configuration's planes, built whole and never changed:
// a request loads the running snapshot once (Handler) and finishes under
// it, whatever a reload swaps in meanwhile.
type snapshot struct {
	cfg     *config.Config
	gw      *gateway.Gateway
	op      *control.Operator
	rec     *reconcile.Reconciler
	handler http.Handler
}

// build makes a configuration's snapshot on the server's lasting parts.
// The web page is the snapshot's too; its sessions are the server's, and
// a reload ends those whose principal it removed or changed (Reload).
func (s *Server) build(cfg *config.Config) (*snapshot, error) {
	gw, err := gateway.New(cfg, s.deps(cfg))
	if err != nil {
		return nil, err
	}
	sn := &snapshot{cfg: cfg, gw: gw}
	sn.op = &control.Operator{Store: s.store, MaxResponse: int64(cfg.MaxResponse), Wake: gw.Changed,
		Resolved: s.resolved, Actions: sn.action, Settled: gw.Settled, Operators: cfg.IsOperator,
		Approvers: cfg.Approvers}
	sn.rec = gateway.NewReconciler(cfg, s.store, s.record(), s.log)
	if s.mcp == nil { // the first snapshot's; mcp_servers need a restart
		if s.mcp, err = s.mcpProxy(sn); err != nil {
			return nil, err
		}
	}
	if sn.handler, err = s.mount(sn); err != nil {
		return nil, err
	}
	return sn, nil
}

// Reload re-reads the running configuration's file (SIGHUP, idemgate
// reload, POST /_idem/v1/config/reload) and, if it is valid and changes
// nothing that needs a restart, serves it to the requests that arrive
// from now on; those in flight finish under the configuration they began
// with. Otherwise the running configuration stays, and the error says
// why, with the file and line. Either way the metrics count it and the
// log says it.
func (s *Server) Reload(ctx context.Context) error {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	start := time.Now()
	file, err := s.reload()
	s.metrics.ConfigReloaded(err)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "configuration not reloaded: the running one is kept",
			slog.String("file", file), slog.String("error", err.Error()))
		return err
	}
	s.rechecks.signal()
	s.log.LogAttrs(ctx, slog.LevelInfo, "configuration reloaded", slog.String("file", file),
		slog.Int("routes", len(s.cur.Load().cfg.Routes)), slog.Duration("took", time.Since(start)))
	return nil
}

// reloadAsked is Reload for the control API: its error names the files
// of the configuration's directory relative to it (gw.yaml:12, not the
// gateway's disk layout); the log has them whole.
func (s *Server) reloadAsked(ctx context.Context) error {
	err := s.Reload(ctx)
	if err == nil {
		return nil
	}
	dir := filepath.Dir(s.Config().File()) + string(filepath.Separator)
	return errors.New(strings.ReplaceAll(err.Error(), dir, ""))
}

func (s *Server) reload() (string, error) {
	running := s.cur.Load().cfg
	next, err := config.Load(running.File())
	if err == nil {
		err = running.Reloadable(next)
	}
	if err != nil {
		return running.File(), err
	}
	// The settings that are no YAML (a drill's, the benchmark's) are the
	// process's, not the file's.
	next.HoldBeforeForward, next.Unobserved, next.Clock = running.HoldBeforeForward, running.Unobserved, running.Clock
	sn, err := s.build(next)
	if err != nil {
		return running.File(), err
	}
	s.limits.SetPolicy(next.Policy)
	s.cur.Store(sn)
	ended := s.sessions.Retain(func(p approval.Principal, credential string) bool {
		return next.StillAuthenticates(p.Name, p.Tenant, p.Roles, credential)
	})
	if ended > 0 {
		s.log.Info("web page sessions ended by the reload: their principals changed", slog.Int("sessions", ended))
	}
	return running.File(), nil
}

// Config is the running configuration.
func (s *Server) Config() *config.Config { return s.cur.Load().cfg }
