package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/idemgate/idemgate/contract"
)

// benchAction is the action the gateways declare: an effect the caller
// performs itself, reserved and completed over HTTP (docs/design.md,
// "Actions").
const benchAction = "bench.ticket.create"

// maxActionRatio is issue 21's target: an action effect's p50 at the
// highest concurrency within 1.3× a proxied keyed write's.
const maxActionRatio = 1.3

// grantOf is what an action effect needs of the 201 of a reservation.
type grantOf struct {
	Operation struct {
		ID string `json:"id"`
	} `json:"operation"`
	Lease contract.LeaseView `json:"lease"`
}

// sendAction is one action effect under a new key, as a caller performs
// it: reserve (201, the lease), then complete with the result, each on
// the client's keep-alive connections. The command is the proxied write's
// body and the result the upstream's answer, byte for byte.
func sendAction(client *http.Client, base, key string) error {
	body, err := post(client, base+contract.ActionsPath+"/"+benchAction, key, []byte(ticketBody), http.StatusCreated)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	var g grantOf
	if err := json.Unmarshal(body, &g); err != nil || g.Operation.ID == "" || g.Lease.Token == "" {
		return fmt.Errorf("reserve: %s: %v", body, err)
	}
	step, err := json.Marshal(contract.OwnerStep{Token: g.Lease.Token, Fence: g.Lease.Fence,
		State: "succeeded", Result: json.RawMessage(ticketAnswer)})
	if err != nil {
		return err
	}
	url := base + contract.ControlPrefix + "/operations/" + g.Operation.ID + "/" + contract.StepComplete
	if _, err := post(client, url, "", step, http.StatusOK); err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	return nil
}

// post sends body as the bench principal, with key if set, and returns
// the answer's body, read whole so that the connection is reused.
func post(client *http.Client, url, key string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set(contract.HeaderKey, key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, answer)
	}
	return answer, nil
}

// actionNote says what the action rows measure, printed above the checks.
func actionNote(w io.Writer, hi int) {
	fmt.Fprintf(w, `action rows: one sample is one whole effect, POST %s/%s
  (reserve: 201 and the lease), then POST %s/operations/{id}/complete with the result,
  on keep-alive connections. The command is the new-key write's body, the result the
  upstream's answer, byte for byte; measured in the new-key rounds, beside the same
  gateway's proxied writes. An effect is two round trips where a proxied write is one,
  with the same two durable commits: at c=1 the second exchange and its reads add up in
  full, so that ratio is information, not a target; at c=%d the target (≤ %.1f×) applies.
`, contract.ActionsPath, benchAction, contract.ControlPrefix, hi, maxActionRatio)
}

// actionChecks compares a gateway's action effects with its proxied
// new-key writes of the same size, p50 against p50, at each concurrency:
// at the highest it is judged against maxActionRatio, below it only told.
func actionChecks(r map[row]*result, gw string, concurrencies []int) []check {
	hi := slices.Max(concurrencies)
	var out []check
	for _, c := range concurrencies {
		act, write := r[row{gw, action, c}], r[row{gw, "new-key", c}]
		if act == nil || write == nil {
			continue
		}
		ratio := float64(act.p50) / float64(write.p50)
		ch := check{what: fmt.Sprintf("%s action effect / proxied write at c=%d", gw, c),
			got: fmt.Sprintf("p50 %.3f vs %.3f ms: %.2f× (rounds %s)", ms(act.p50), ms(write.p50), ratio,
				p50Range(act, write)),
			passed: true}
		if c == hi {
			ch.want, ch.passed = fmt.Sprintf("≤ %.1f×", maxActionRatio), ratio <= maxActionRatio
		}
		out = append(out, ch)
	}
	return out
}

// p50Range is the lowest and highest round-by-round ratio of a's median
// latency to b's, rounds paired in order.
func p50Range(a, b *result) string {
	return roundRange(a, b, func(r round) float64 { return float64(quantile(r.lat, 0.5)) })
}
