package control

import (
	"net/http"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// reload answers POST /config/reload, to an operator: the gateway
// re-reads its file (Options.Reload). A reload changes every tenant's
// routes and principals, so a tenant's admin may not ask for one; the
// refusal of a file is invalid_request with the error, file and line,
// and the running configuration stays.
func (a *API) reload(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := a.op.RequireOperator(c, "a reload of the configuration"); err != nil {
		fail(w, err, "")
		return
	}
	if a.opts.Reload == nil {
		contract.NewProblem(contract.CodeNotFound, "this server has no configuration file to reload").Write(w)
		return
	}
	if err := a.opts.Reload(r.Context()); err != nil {
		contract.NewProblem(contract.CodeInvalidRequest, "configuration not reloaded, the running one is kept: "+
			err.Error()).Write(w)
		return
	}
	writeJSON(w, http.StatusOK, contract.ReloadView{Reloaded: true, At: time.Now().UTC()})
}
