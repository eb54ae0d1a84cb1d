package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/cmd/internal/server"
)

// reloadOnHangup reloads the server's configuration on each SIGHUP until
// ctx ends. Server.Reload logs and counts what it did.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, s *server.Server, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: reloading the configuration")
			_ = s.Reload(ctx)
		}
	}
}

// writePidFile writes this process's id to path, whole or not at all (a
// reader never sees half a number).
func writePidFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".idemgate-pid-*")
	if err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = fmt.Fprintf(tmp, "%d\n", os.Getpid())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	return nil
}

func newReloadCmd() *cobra.Command {
	var pidFile, gw string
	cmd := &cobra.Command{
		Use:   "reload (--pid-file FILE | --gateway URL)",
		Short: "Make a running gateway re-read its configuration file",
		Long: `reload asks a running idemgate serve to re-read its configuration: with
--pid-file (the file serve --pid-file wrote) it sends the process SIGHUP, and the
gateway's log and its idemgate_config_reload_errors_total say whether the file
was applied; with --gateway (or IDEMGATE_URL) it calls the control API as the
operator (a principal the configuration names in operators:) whose token is in
IDEMGATE_TOKEN, and prints the gateway's answer: applied,
or refused with the file and line (the running configuration is then kept).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pidFile != "" {
				return signalReload(pidFile, cmd)
			}
			c, err := newApprovalsClient(gw)
			if err != nil {
				return fmt.Errorf("%w (or pass --pid-file)", err)
			}
			v, err := c.Reload(cmd.Context())
			if err != nil {
				return fmt.Errorf("reload: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "reloaded at %s\n", v.At.Format("2006-01-02T15:04:05Z07:00"))
			return nil
		},
	}
	cmd.Flags().StringVar(&pidFile, "pid-file", "", "the pid file of the running idemgate serve")
	cmd.Flags().StringVar(&gw, "gateway", os.Getenv("IDEMGATE_URL"), "gateway URL (default $IDEMGATE_URL)")
	return cmd
}

// signalReload sends SIGHUP to the process the pid file names, once it
// has checked that the process is an idemgate (where /proc says so): a
// stale pid file must not hang up a stranger that took the number.
func signalReload(pidFile string, cmd *cobra.Command) error {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("pid file %s: %q is no process id", pidFile, bytes.TrimSpace(data))
	}
	if args, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && !isServe(args) {
		return fmt.Errorf("pid file %s: process %d is not idemgate (a stale pid file?)", pidFile, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pid file %s: no process %d (a stale pid file?)", pidFile, pid)
		}
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sent SIGHUP to %d: the gateway's log says whether the file was applied\n", pid)
	return nil
}

// removePidFile removes the pid file if it still names this process: a
// serve started after this one on the same file (a deploy that starts the
// new one, then stops the old) keeps its file, and its reloads.
func removePidFile(path string) {
	data, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(data)) == strconv.Itoa(os.Getpid()) {
		_ = os.Remove(path)
	}
}

// isServe reports whether a /proc cmdline (arguments separated by NULs)
// is an idemgate serve: its program's path names idemgate (idemgate.test
// in tests, /opt/idemgate/bin/gw) and serve is among its arguments. A
// program that merely mentions idemgate in its arguments (a shell, a pager
// on its log) is not one: SIGHUP would end it.
func isServe(cmdline []byte) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	return strings.Contains(args[0], "idemgate") && slices.Contains(args[1:], "serve")
}
