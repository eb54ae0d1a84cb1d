package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/idemgate/idemgate/config"
	"hash"
	"io"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// consumer is one consumer's way to its upstream: a message's effect is
// a POST (its method) of its body to the upstream's path.
type consumer struct {
	cfg         *config.Consumer
	uc          *upstreamClient
	maxResponse int64
	policy      keyed.Policy
}

// consumersOf is each configured consumer's way, by name.
func (g *Gateway) consumersOf(clients map[string]*upstreamClient) map[string]*consumer {
	out := map[string]*consumer{}
	for _, k := range g.cfg.Consumers {
		uc := clients[k.Deliver.Upstream]
		out[k.Name] = &consumer{cfg: k, uc: uc, maxResponse: int64(g.cfg.MaxResponse),
			policy: keyed.Policy{Name: k.Route(), Kind: ledger.KindConsumer, Lease: k.Lease, Retention: k.Retention,
				Resend: uc.cfg.HonoursKey, MaxAnswer: int64(g.cfg.MaxResponse)}}
	}
	return out
}

// Deliverer is consumer name's Deliverer on this configuration's
// executor, or nil when no consumer has that name.
func (g *Gateway) Deliverer(name string) inbox.Deliverer {
	c := g.consumers[name]
	if c == nil {
		return nil
	}
	rate := func(tenant string) *contract.Problem {
		if ref := g.limits.Request(tenant); ref != nil {
			return refused(ref)
		}
		return nil
	}
	return &inbox.Keyed{Executor: g.x, Name: name, Tenant: c.cfg.Tenant, Policy: &c.policy,
		Method: c.cfg.Deliver.Method, Target: c.cfg.Deliver.Method + " " + c.cfg.Deliver.Path, Rate: rate, Send: c.send}
}

// send delivers a message to the upstream, with the key in the
// consumer's namespace, and says what its answer means (the consumer's
// outcomes, as a route's).
func (c *consumer) send(ctx context.Context, run *keyed.Run, d inbox.Delivery) (keyed.Outcome, error) {
	in, err := http.NewRequestWithContext(ctx, c.cfg.Deliver.Method, c.cfg.Deliver.Path, bytes.NewReader(d.Body))
	if err != nil {
		return keyed.Outcome{}, contract.NotSent("upstream", err)
	}
	ct := d.ContentType
	if ct == "" {
		ct = "application/json"
	}
	in.Header.Set("Content-Type", ct)
	op := run.Operation()
	out := c.uc.outbound(in, ledger.UpstreamKey(op.Tenant, op.Namespace, op.Key))
	resp, done, err := c.uc.send(out, run.OperationID())
	if err != nil {
		return keyed.Outcome{}, err
	}
	defer done()
	kept, err := keep(resp.Body, c.maxResponse)
	if err != nil {
		return keyed.Outcome{}, contract.NoAnswer("upstream", fmt.Errorf("the upstream's answer was cut off: %w", err))
	}
	answer := &ledger.Response{Status: resp.StatusCode, Header: resp.Header, Body: kept.body}
	o := keyed.Outcome{Fate: c.cfg.Outcomes.Classify(resp.StatusCode), Answer: answer,
		Streamed: kept.over, Size: kept.size, SHA256: kept.digest()}
	if kept.over {
		answer.Body = nil
	}
	return o, nil
}

// kept is an answer's body read whole: up to max bytes kept, its size
// and digest counted over all of it.
type kept struct {
	body []byte
	size int64
	over bool
	sum  hash.Hash
}

func (k *kept) digest() string {
	if !k.over {
		return ""
	}
	return hex.EncodeToString(k.sum.Sum(nil))
}

// keep reads r whole, keeping at most max bytes of it.
func keep(r io.Reader, max int64) (*kept, error) {
	k := &kept{sum: sha256.New()}
	body, err := io.ReadAll(io.LimitReader(r, max+1))
	k.sum.Write(body)
	k.size = int64(len(body))
	if err != nil {
		return nil, err
	}
	if k.size <= max {
		k.body = body
		return k, nil
	}
	k.over = true
	n, err := io.Copy(k.sum, r)
	k.size += n
	return k, err
}
