package gateway

import (
	"net/http"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
)

// actionRoute is the middleware's route that reserves an action.
func (g *Gateway) actionRoute(a *config.Action) (httpidem.Route, error) {
	route := httpidem.Route{Method: http.MethodPost, Pattern: contract.ActionsPath + "/" + a.Name, Action: a.Name,
		BusinessKey: a.BusinessKey, ConcurrencyKey: a.ConcurrencyKey, Lease: a.Lease, Retention: a.Retention,
		MaxBody: int64(a.MaxBody), Approval: a.Policy()}
	if a.Probe() != nil {
		route.Probe = a.Probe().Render
	}
	route.Validate = a.Validator()
	return route, nil
}
