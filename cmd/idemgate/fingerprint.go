package main

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/fingerprint"
)

func newFingerprintCmd() *cobra.Command {
	var (
		req     fingerprint.Request
		headers []string
		limits  fingerprint.Limits
	)
	cmd := &cobra.Command{
		Use:   "fingerprint --method M --route TEMPLATE --tenant T [--header NAME:VALUE ...]",
		Short: "Print the fingerprint of a request whose body is on stdin",
		Long: `fingerprint prints "sha256:" and the hex SHA-256 of the canonical JSON of
{"method","route","tenant","command"[,"headers"]}, the value idemgate binds an
Idempotency-Key to. The body is read on stdin; an empty body is a null command.
Name only the headers the route's fingerprint.headers lists.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readLimited(cmd.InOrStdin(), limits.MaxBytes)
			if err != nil {
				return err
			}
			if len(bytes.TrimSpace(data)) > 0 {
				if req.Command, err = fingerprint.Parse(data, limits); err != nil {
					return fmt.Errorf("body: %w", err)
				}
			}
			if req.Headers, err = parseHeaders(headers); err != nil {
				return err
			}
			fp, err := fingerprint.Of(req)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), fp)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Method, "method", "", "HTTP method (required)")
	f.StringVar(&req.Route, "route", "", "route template, e.g. /v1/tickets/{id} (required)")
	f.StringVar(&req.Tenant, "tenant", "", "tenant (required)")
	f.StringArrayVar(&headers, "header", nil, "NAME:VALUE of a fingerprinted header (repeatable)")
	f.IntVar(&limits.MaxBytes, "max-bytes", fingerprint.DefaultMaxBytes, "largest body accepted")
	for _, name := range []string{"method", "route", "tenant"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func parseHeaders(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(list))
	for _, h := range list {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("--header %q: want NAME:VALUE", h)
		}
		out[name] = strings.TrimSpace(value)
	}
	return out, nil
}
