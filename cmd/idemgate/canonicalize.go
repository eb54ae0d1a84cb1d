package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/fingerprint"
)

func newCanonicalizeCmd() *cobra.Command {
	var limits fingerprint.Limits
	cmd := &cobra.Command{
		Use:   "canonicalize",
		Short: "Print the RFC 8785 canonical form of the JSON document on stdin",
		Long: `canonicalize reads one JSON document on stdin and writes its RFC 8785 canonical
form to stdout, without a trailing newline. Invalid input (bad JSON or UTF-8,
duplicate member names, too deep or too large) exits 1 with the reason on
stderr.

Numbers are checked as for fingerprints: one is accepted only if its canonical
form denotes exactly the value written (1.0, 1e2 and 123000000000000000 pass;
9007199254740993 and 0.10000000000000000001 are refused, since a double would
make them 9007199254740992 and 0.1). --rfc8785 canonicalizes as RFC 8785 is
written instead, rounding every number to the nearest double, as other RFC 8785
implementations do; idemgate never fingerprints that way.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readLimited(cmd.InOrStdin(), limits.MaxBytes)
			if err != nil {
				return err
			}
			out, err := fingerprint.Canonicalize(data, limits)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().IntVar(&limits.MaxBytes, "max-bytes", fingerprint.DefaultMaxBytes, "largest document accepted")
	cmd.Flags().IntVar(&limits.MaxDepth, "max-depth", fingerprint.DefaultMaxDepth, "deepest nesting accepted")
	cmd.Flags().BoolVar(&limits.Rounding, "rfc8785", false, "round numbers to the nearest double, as RFC 8785 is written")
	return cmd
}

// readLimited reads r whole, reading one byte past max so that Parse can
// report the document as too large instead of the read truncating it.
func readLimited(r io.Reader, max int) ([]byte, error) {
	if max <= 0 {
		max = fingerprint.DefaultMaxBytes
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	return data, nil
}
