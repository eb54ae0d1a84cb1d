// A DBOS workflow whose step's effect is an idemgate action: run it with
// -crash, and the process exits after the effect is recorded at the
// gateway and before DBOS checkpoints the step; run it again, and DBOS's
// recovery runs the step again, which gets the recorded result:
// replies.txt holds one reply.
//
//	idemgate serve --config examples/durable/gateway.yaml   # from the repository's root
//	cd examples/durable && go run ./dbos -crash; go run ./dbos
//
// IDEMGATE_URL (default http://127.0.0.1:8080), IDEMGATE_TOKEN (default
// the example's worker-demo-token), DBOS_SYSTEM_DATABASE_URL (default
// sqlite:dbos.db; a postgres:// URL works too).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"

	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/examples/durable"
	"github.com/idemgate/idemgate/integrations/dbos"
)

func main() {
	crash := flag.Bool("crash", false, "exit after the effect is recorded, before DBOS checkpoints the step")
	flag.Parse()
	if err := run(*crash); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(crash bool) error {
	gw, err := client.New(durable.Env("IDEMGATE_URL", "http://127.0.0.1:8080"), durable.Env("IDEMGATE_TOKEN", "worker-demo-token"))
	if err != nil {
		return err
	}
	ctx, err := dbos.NewContext(context.Background(), dbos.Config{AppName: "idemgate-example",
		DatabaseURL: durable.Env("DBOS_SYSTEM_DATABASE_URL", "sqlite:dbos.db"),
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		return err
	}
	defer dbos.Shutdown(ctx, 5*time.Second)
	reply := func(ctx dbos.Context, t durable.Ticket) (durable.Sent, error) {
		return dbos.RunAsStep(ctx, func(sctx context.Context) (durable.Sent, error) {
			sent, err := idemdbos.Act(sctx, gw, idemdbos.Action{Name: "support.reply.send", Command: t},
				func(context.Context) (durable.Sent, error) { return durable.Append(t) })
			if err == nil && crash {
				fmt.Println("the reply is sent and recorded; exiting before DBOS checkpoints the step")
				os.Exit(3)
			}
			return sent, err
		}, dbos.WithStepName("send-reply"))
	}
	dbos.RegisterWorkflow(ctx, reply, dbos.WithWorkflowName("reply"))
	if err := dbos.Launch(ctx); err != nil { // recovers a workflow a crash left pending
		return err
	}
	const id = "reply-584-v3"
	h, err := dbos.RetrieveWorkflow[durable.Sent](ctx, id)
	if errors.Is(err, dbos.ErrNonExistentWorkflow) {
		h, err = dbos.RunWorkflow(ctx, reply, durable.Ticket{ID: "584", Version: 3}, dbos.WithWorkflowID(id))
	}
	if err != nil {
		return err
	}
	sent, err := h.GetResult()
	if err != nil {
		return err
	}
	fmt.Printf("workflow %s: reply on line %d; %s holds %d replies\n", id, sent.Line, durable.File, durable.Lines())
	return nil
}
