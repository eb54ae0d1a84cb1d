package mcpproxy

import (
	"context"
	"log/slog"
	"strings"
)

// clientErrors are the SDK's ERROR lines that say a client broke the
// protocol (a tools/call before initialize, a second initialize): the
// client is told, and the log takes them at DEBUG; an ERROR is the
// gateway's own trouble, which an operator acts on.
var clientErrors = map[string]bool{
	"method invalid during initialization": true,
	"method removed in the new protocol":   true,
	"initialized before initialize":        true,
	"duplicate initialized notification":   true,
	"duplicate initialize request":         true,
}

// sdkLogger is the logger handed to the SDK: log's, with the clients'
// errors and undeliverable change notices at DEBUG.
func sdkLogger(log *slog.Logger) *slog.Logger { return slog.New(demoting{log.Handler()}) }

type demoting struct{ slog.Handler }

// Enabled implements slog.Handler: an ERROR line may become a DEBUG one,
// so it is asked for at the level it will have.
func (d demoting) Enabled(ctx context.Context, l slog.Level) bool {
	return d.Handler.Enabled(ctx, l) || l == slog.LevelError
}

// Handle implements slog.Handler.
func (d demoting) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelError && clientErrors[r.Message] {
		r.Level = slog.LevelDebug
	}
	// A session that cannot be told of a change (a client without a
	// standalone stream) is not a WARN line each: publish logs the one
	// line that says what changed.
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "calling notifications/") {
		r.Level = slog.LevelDebug
	}
	if !d.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (d demoting) WithAttrs(as []slog.Attr) slog.Handler { return demoting{d.Handler.WithAttrs(as)} }

// WithGroup implements slog.Handler.
func (d demoting) WithGroup(name string) slog.Handler { return demoting{d.Handler.WithGroup(name)} }
