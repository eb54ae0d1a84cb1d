package idemdbos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/integrations/dbos"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The child is this test binary run again as a DBOS application (TestMain
// runs it when IDEMDBOS_CHILD is set): its workflow performs one reply at
// the upstream through idemgate. The test SIGKILLs it mid-workflow and
// starts it again, and DBOS's recovery finishes the workflow.

// Ticket is the workflow's input.
type Ticket struct {
	ID string `json:"id"`
}

// Sent is what the upstream answered an effect.
type Sent struct {
	Effect string `json:"effect"`
}

// childEnv is what the child is told, in its environment.
type childEnv struct {
	Mode     string // "record" (Act in a step of its own) or "run" (idemdbos.Run)
	Life     string // "first" starts the workflow; "recover" lets DBOS recover it
	Hold     bool   // after the effect is recorded, print "recorded" and block (record mode)
	DBURL    string
	Schema   string
	Gateway  string
	Token    string
	Upstream string
	Workflow string
}

func readChildEnv() childEnv {
	return childEnv{Mode: os.Getenv("CHILD_MODE"), Life: os.Getenv("CHILD_LIFE"), Hold: os.Getenv("CHILD_HOLD") == "1",
		DBURL: os.Getenv("CHILD_DB"), Schema: os.Getenv("CHILD_SCHEMA"), Gateway: os.Getenv("CHILD_GATEWAY"),
		Token: os.Getenv("CHILD_TOKEN"), Upstream: os.Getenv("CHILD_UPSTREAM"), Workflow: os.Getenv("CHILD_WORKFLOW")}
}

func (e childEnv) environ() []string {
	hold := "0"
	if e.Hold {
		hold = "1"
	}
	return append(os.Environ(), "IDEMDBOS_CHILD=1", "CHILD_MODE="+e.Mode, "CHILD_LIFE="+e.Life, "CHILD_HOLD="+hold,
		"CHILD_DB="+e.DBURL, "CHILD_SCHEMA="+e.Schema, "CHILD_GATEWAY="+e.Gateway, "CHILD_TOKEN="+e.Token,
		"CHILD_UPSTREAM="+e.Upstream, "CHILD_WORKFLOW="+e.Workflow)
}

// runChild is the child's main: it prints "result JSON" once the workflow
// is done, and exits 0; any failure exits 1 with the reason on stderr.
func runChild() int {
	e := readChildEnv()
	if err := child(e); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func child(e childEnv) error {
	ctx, err := dbos.NewContext(context.Background(), dbos.Config{AppName: "idemdbos-test", DatabaseURL: e.DBURL,
		DatabaseSchema: e.Schema, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer dbos.Shutdown(ctx, 5*time.Second)
	gw, err := client.New(e.Gateway, e.Token)
	if err != nil {
		return err
	}
	w := &replies{e: e, gw: gw}
	dbos.RegisterWorkflow(ctx, w.Reply, dbos.WithWorkflowName("reply"))
	if err := dbos.Launch(ctx); err != nil {
		return err
	}
	var h dbos.WorkflowHandle[Sent]
	if e.Life == "first" {
		h, err = dbos.RunWorkflow(ctx, w.Reply, Ticket{ID: "584"}, dbos.WithWorkflowID(e.Workflow))
	} else {
		h, err = dbos.RetrieveWorkflow[Sent](ctx, e.Workflow) // Launch's recovery runs it
	}
	if err != nil {
		return err
	}
	sent, err := h.GetResult()
	if err != nil {
		return err
	}
	out, _ := json.Marshal(sent)
	fmt.Printf("result %s\n", out)
	return nil
}

// replies holds the workflow, and what it is told.
type replies struct {
	e  childEnv
	gw *client.Client
}

// Reply performs one reply at the upstream as support.reply.send.
func (r *replies) Reply(ctx dbos.Context, t Ticket) (Sent, error) {
	a := idemdbos.Action{Name: "support.reply.send", Command: t}
	if r.e.Mode == "run" {
		return idemdbos.Run(ctx, r.gw, a, r.send(t), idemdbos.Options{Poll: 200 * time.Millisecond, Wait: time.Second})
	}
	return dbos.RunAsStep(ctx, func(sctx context.Context) (Sent, error) {
		sent, err := idemdbos.Act(sctx, r.gw, a, r.send(t))
		if err == nil && r.e.Hold {
			fmt.Printf("recorded %s\n", sent.Effect)
			select {} // killed here: after the effect is recorded, before DBOS checkpoints the step
		}
		return sent, err
	}, dbos.WithStepName("reply"))
}

// send is the effect: one POST at the upstream.
func (r *replies) send(t Ticket) func(ctx context.Context) (Sent, error) {
	return func(ctx context.Context) (Sent, error) {
		effect, err := testenv.PostEffect(ctx, r.e.Upstream, "reply-"+t.ID)
		return Sent{Effect: effect}, err
	}
}
