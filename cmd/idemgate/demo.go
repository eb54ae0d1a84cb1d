package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/opsapi"
	"github.com/idemgate/idemgate/internal/scenarios"
)

func newDemoCmd() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo [--keep]",
		Short: "Show the whole idea in a few seconds: an agent, the gateway, a naive ops API, and faults",
		Long:  demoLong(scenarios.Demo()),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), keep)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "leave both servers running after the scenario")
	return cmd
}

// demoLong is demo --help, its acts listed from the acts played, so that
// it never tells another story than the one the demo plays.
func demoLong(acts []scenarios.Act) string {
	var b strings.Builder
	fmt.Fprintf(&b, `demo starts the reference ops API (naive: it ignores idempotency keys, with
fault injection) and the gateway in front of it, on SQLite files in a
temporary directory, then plays %d acts, in a few seconds, each judged by
the effects the API performed:
`, len(acts))
	for i, a := range acts {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, a.Action)
	}
	b.WriteString(`It ends with a table of requests sent and effects performed, and exits
non-zero if any effect count is wrong. --keep leaves both servers running and
says where they are: the API through the gateway, the web page (/ui/) and the
approver's token to sign in with, /metrics, the files.`)
	return b.String()
}

func runDemo(ctx context.Context, out io.Writer, keep bool) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dir, err := os.MkdirTemp("", "idemgate-demo-")
	if err != nil {
		return err
	}
	env, err := startDemo(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	env.out, env.tty = out, isTerminal(out)
	failed := env.play(ctx, scenarios.Demo())
	if keep {
		env.printNext()
		<-ctx.Done()
	}
	env.stop()
	if !keep {
		os.RemoveAll(dir)
	}
	if failed > 0 {
		return fmt.Errorf("demo: %d step(s) did not perform the expected effects", failed)
	}
	return nil
}

// The audit log's signing key and checkpoints file, in the demo's directory.
const (
	demoKey         = "audit.key"
	demoCheckpoints = "audit-checkpoints.jsonl"
)

// Tokens of the demo's principals (their hashes are in its config).
const (
	demoAgentToken    = "demo-agent-token"
	demoOperatorToken = "demo-operator-token"
	demoApproverToken = "demo-approver-token"
)

// demoEnv is the running demo: both servers, and where it writes.
type demoEnv struct {
	dir, apiURL, gwURL, storeDSN string
	out                          io.Writer
	tty                          bool
	stop                         func()
}

// startDemo starts the naive ops API and the gateway in this process,
// their logs in files of dir, so that the terminal shows only the story.
func startDemo(ctx context.Context, dir string) (*demoEnv, error) {
	ctx, cancel := context.WithCancel(ctx)
	api, apiURL, err := startDemoAPI(ctx, dir)
	if err != nil {
		cancel()
		return nil, err
	}
	e := &demoEnv{dir: dir, apiURL: apiURL, storeDSN: "sqlite:" + filepath.Join(dir, "gateway.db")}
	cfg, err := writeDemoConfig(dir, apiURL, e.storeDSN)
	var gs *gatewayServer
	var logf *os.File
	if err == nil {
		logf, err = os.Create(filepath.Join(dir, "gateway.log"))
	}
	if err == nil {
		gs, err = listenGateway(ctx, cfg, slog.New(slog.NewJSONHandler(logf, nil)))
	}
	if err != nil {
		cancel()
		api.Close()
		return nil, err
	}
	e.gwURL = "http://" + gs.addr()
	done := make(chan struct{})
	go func() { _ = gs.run(ctx); close(done) }()
	e.stop = func() {
		cancel()
		<-done
		api.Close()
		logf.Close()
	}
	return e, nil
}

// startDemoAPI serves opsapi --naive --faults on a free port until ctx ends.
func startDemoAPI(ctx context.Context, dir string) (*opsapi.Server, string, error) {
	api, err := opsapi.New(ctx, opsapi.Options{Path: filepath.Join(dir, "ops.db"), Naive: true, Faults: true,
		DeployDuration: 5 * time.Second})
	if err != nil {
		return nil, "", err
	}
	h, err := api.Handler()
	var ln net.Listener
	if err == nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		api.Close()
		return nil, "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return api, "http://" + ln.Addr().String(), nil
}

func writeDemoConfig(dir, apiURL, storeDSN string) (*config.Config, error) {
	text := fmt.Sprintf(`# The demo's gateway: idemgate serve --config %[1]s
listen: 127.0.0.1:0
store: %[2]s
upstreams:
  ops: {url: %[3]s, timeout: 2s}
principals:
  - {name: agent, tenant: demo, roles: [agent], token_sha256: %[4]s}
  - {name: operator, tenant: demo, roles: [admin], token_sha256: %[5]s}
  - {name: alice, tenant: demo, roles: [approver], token_sha256: %[6]s}
audit: {signing_key: %[7]s, checkpoint_interval: 100ms, checkpoints_file: %[8]s}
routes:
  - {match: POST /v1/tickets, upstream: ops, business_key: /source_event_id, result_ref: body:/id}
  - {match: "GET /v1/tickets/{id}", upstream: ops}
  - {match: POST /v1/payment-intents, upstream: ops, business_key: /order_id}
  - {match: "POST /v1/payment-intents/{id}/capture", upstream: ops, result_ref: body:/id}
  - {match: GET /v1/payment-intents, upstream: ops}
  - match: POST /v1/deployments
    upstream: ops
    concurrency_key: /environment
    approval: {when: 'body.environment == "production"', ttl: 15m, reversible: false,
               summary: 'Deploy {{.body.artifact}} to {{.body.environment}} ({{.body.service}})'}
  - {match: "GET /v1/deployments/{id}", upstream: ops}
`, filepath.Join(dir, "gateway.yaml"), storeDSN, apiURL, sha256Hex(demoAgentToken), sha256Hex(demoOperatorToken),
		sha256Hex(demoApproverToken), filepath.Join(dir, demoKey), filepath.Join(dir, demoCheckpoints))
	if _, err := audit.Keygen(filepath.Join(dir, demoKey), "idemgate-demo"); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return nil, err
	}
	return config.Load(path)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// printNext says where everything is, and what to try, once the scenario
// is over (--keep).
func (e *demoEnv) printNext() {
	fmt.Fprintf(e.out, `
Both servers keep running until Ctrl-C. Their files (config, stores, logs) stay in %[1]s
The gateway: %[2]s   the ops API behind it: %[6]s
The web page, for approvers and operators: %[2]s/ui/
  sign in with the approver's token %[11]s (alice), or the operator's %[4]s
Metrics (Prometheus text):
  curl -s %[2]s/metrics -H 'Authorization: Bearer %[4]s'
Make a production deploy wait for alice's approval, then decide it on the web page:
  curl -i %[2]s/v1/deployments -H 'Authorization: Bearer %[3]s' -H '%[8]s: try-deploy' \
    -H 'Content-Type: application/json' -d '%[12]s'
Send a ticket twice; the second answer carries %[7]s: true:
  curl -i %[2]s/v1/tickets -H 'Authorization: Bearer %[3]s' -H '%[8]s: try-1' \
    -H 'Content-Type: application/json' -d '{"project":"OPS","title":"Try me","priority":3}'
Change the title and send it again with the same key: 422 %[9]s.
Look at the operations (the control API, as the operator):
  curl -s '%[2]s%[10]s/operations?limit=20' -H 'Authorization: Bearer %[4]s'
  go run ./cmd/idemgate ops list --store %[5]s
Count what the ops API really did:
  curl -s %[6]s/v1/effects
`, e.dir, e.gwURL, demoAgentToken, demoOperatorToken, e.storeDSN, e.apiURL, contract.HeaderReplayed,
		contract.HeaderKey, contract.CodeFingerprintMismatch, contract.ControlPrefix, demoApproverToken,
		scenarios.Deployment("production", scenarios.DigestOther))
}
