package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/fingerprint"
)

// fingerprintFlags are the parts of a request given on the command line.
type fingerprintFlags struct {
	req         fingerprint.Request
	params      []string
	query       string
	headers     []string
	contentType string
	body        fingerprint.BodyOptions
}

func newFingerprintCmd() *cobra.Command {
	var ff fingerprintFlags
	cmd := &cobra.Command{
		Use:   "fingerprint --method M --route TEMPLATE --tenant T [--param NAME=VALUE ...] [--query QUERY]",
		Short: "Print the fingerprint of a request whose body is on stdin",
		Long: `fingerprint prints "sha256:" and the hex SHA-256 of the RFC 8785 canonical JSON of
{"method","route","params","query","tenant","command"[,"headers"]}, the value
idemgate binds an Idempotency-Key to:

  route    the route template (/v1/tickets/{id}), not the concrete path
  params   its path parameters' values by name, from --param id=T-7, {} if none
  query    the query string as name -> values in order, from
           --query 'dry_run=true&tag=a&tag=b' (without the '?'), {} if none
  command  the body on stdin as its --content-type reads it: application/json
           (the default) and */*+json strictly, numbers only if exact;
           application/x-www-form-urlencoded as name -> values; with --opaque,
           any type as {"sha256","type"} of the raw bytes. An empty body is null.
  headers  only when given: name only the headers the route's
           fingerprint.headers lists.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readLimited(cmd.InOrStdin(), ff.body.Limits.MaxBytes)
			if err != nil {
				return err
			}
			if err := ff.complete(data); err != nil {
				return err
			}
			fp, err := fingerprint.Of(ff.req)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), fp)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&ff.req.Method, "method", "", "HTTP method (required)")
	f.StringVar(&ff.req.Route, "route", "", "route template, e.g. /v1/tickets/{id} (required)")
	f.StringVar(&ff.req.Tenant, "tenant", "", "tenant (required)")
	f.StringArrayVar(&ff.params, "param", nil, "NAME=VALUE of a path parameter, decoded (repeatable)")
	f.StringVar(&ff.query, "query", "", "the query string, without its '?', e.g. 'dry_run=true'")
	f.StringVar(&ff.contentType, "content-type", fingerprint.MediaJSON, "media type of the body")
	f.BoolVar(&ff.body.Opaque, "opaque", false, "the route declares body: opaque (the body's SHA-256 and type)")
	f.StringArrayVar(&ff.headers, "header", nil, "NAME:VALUE of a fingerprinted header (repeatable)")
	f.IntVar(&ff.body.Limits.MaxBytes, "max-bytes", fingerprint.DefaultMaxBytes, "largest body accepted")
	for _, name := range []string{"method", "route", "tenant"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// complete fills the request from the flags, then from the body.
func (ff *fingerprintFlags) complete(body []byte) error {
	var err error
	if ff.req.Params, err = parseParams(ff.params); err != nil {
		return err
	}
	if strings.HasPrefix(ff.query, "?") {
		return fmt.Errorf("--query %q: give the query string without its leading '?'", ff.query)
	}
	if ff.req.Query, err = url.ParseQuery(ff.query); err != nil {
		return fmt.Errorf("--query: %w", err)
	}
	if ff.req.Headers, err = parseHeaders(ff.headers); err != nil {
		return err
	}
	if ff.req.Command, err = fingerprint.ParseBody(ff.contentType, body, ff.body); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return nil
}

func parseParams(list []string) (map[string]string, error) {
	out := make(map[string]string, len(list))
	for _, p := range list {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--param %q: want NAME=VALUE", p)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--param %q: %s given twice", p, name)
		}
		out[name] = value
	}
	return out, nil
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
