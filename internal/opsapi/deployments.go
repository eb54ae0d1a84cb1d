package opsapi

import (
	"database/sql"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"
)

func (s *Server) routeDeployments(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/deployments", s.deploy)
	mux.HandleFunc("GET /v1/deployments/{id}", s.getDeployment)
	mux.HandleFunc("POST /v1/rollbacks", s.rollback)
}

// immutableArtifact is a 40-hex commit or a sha256 digest: a tag like main
// or latest names whatever it points to when the controller reads it.
var immutableArtifact = regexp.MustCompile(`^([0-9a-f]{40}|sha256:[0-9a-f]{64})$`)

type deployment struct {
	ID          int64  `json:"id"`
	Kind        string `json:"kind"` // deployment or rollback
	Service     string `json:"service"`
	Environment string `json:"environment"`
	Artifact    string `json:"artifact"`
	State       string `json:"state"`
	started     time.Time
	cancelled   bool
}

const deploymentColumns = `id, kind, service, environment, artifact, started_us, cancelled`

func scanDeployment(row interface{ Scan(...any) error }) (deployment, error) {
	var d deployment
	var startedUS int64
	err := row.Scan(&d.ID, &d.Kind, &d.Service, &d.Environment, &d.Artifact, &startedUS, &d.cancelled)
	d.started = time.UnixMicro(startedUS)
	return d, err
}

// state is the simulated controller: queued for the first quarter of the
// rollout, running until its end, then succeeded. An artifact starting with
// f00d fails, and one starting with dead ends unknown (the controller lost
// track of it), so that clients can see both.
func (s *Server) state(d deployment) string {
	elapsed := s.now().Sub(d.started)
	switch {
	case d.cancelled:
		return "cancelled"
	case elapsed < s.opts.DeployDuration/4:
		return "queued"
	case elapsed < s.opts.DeployDuration:
		return "running"
	case strings.HasPrefix(strings.TrimPrefix(d.Artifact, "sha256:"), "f00d"):
		return "failed"
	case strings.HasPrefix(strings.TrimPrefix(d.Artifact, "sha256:"), "dead"):
		return "unknown"
	}
	return "succeeded"
}

func (s *Server) active(d deployment) bool {
	st := s.state(d)
	// An unknown rollout may still be running: the environment stays locked.
	return st == "queued" || st == "running" || st == "unknown"
}

func deploymentFrom(obj map[string]any, artifactField string) (deployment, string, error) {
	var d deployment
	var err error
	if d.Service, err = str(obj, "service", true); err != nil {
		return d, "", err
	}
	if d.Environment, err = str(obj, "environment", true); err != nil {
		return d, "", err
	}
	if d.Artifact, err = str(obj, artifactField, true); err != nil {
		return d, "", err
	}
	if !immutableArtifact.MatchString(d.Artifact) {
		return d, "", refuse(http.StatusUnprocessableEntity, "%s %q is not immutable: give a 40-hex commit or "+
			"sha256:<64 hex>; a tag or branch like main or latest may point elsewhere by the time it deploys",
			artifactField, d.Artifact)
	}
	expected, err := str(obj, "expected_current_version", false)
	return d, expected, err
}

// deploy starts a rollout: at most one active per (service, environment),
// and only from the version the caller expects, if it says one.
func (s *Server) deploy(w http.ResponseWriter, r *http.Request) {
	obj, err := decode(r)
	var d deployment
	var expected string
	if err == nil {
		d, expected, err = deploymentFrom(obj, "artifact")
	}
	if err != nil {
		s.refused(w, err)
		return
	}
	s.write(w, r, func(tx *sql.Tx) (result, error) {
		if err := s.checkEnvironment(tx, d, expected); err != nil {
			return result{}, err
		}
		return s.start(tx, d, "deployment", "deployments_started")
	})
}

// checkEnvironment enforces the lock and the expected version.
func (s *Server) checkEnvironment(tx *sql.Tx, d deployment, expected string) error {
	rows, err := tx.Query(`SELECT `+deploymentColumns+` FROM deployments WHERE service = ? AND environment = ?
		ORDER BY id DESC`, d.Service, d.Environment)
	if err != nil {
		return err
	}
	defer rows.Close()
	current := ""
	for rows.Next() {
		prev, err := scanDeployment(rows)
		if err != nil {
			return err
		}
		if s.active(prev) && !s.opts.Naive {
			return refuse(http.StatusConflict, "deployment %d of %s is still %s in %s", prev.ID, prev.Service,
				s.state(prev), prev.Environment)
		}
		if current == "" && s.state(prev) == "succeeded" {
			current = prev.Artifact
		}
	}
	if expected != "" && expected != current {
		return refuse(http.StatusConflict, "%s has moved: it runs %q, not the expected %q", d.Environment, current, expected)
	}
	return rows.Err()
}

func (s *Server) start(tx *sql.Tx, d deployment, kind, effect string) (result, error) {
	d.Kind, d.started = kind, s.now()
	res, err := tx.Exec(`INSERT INTO deployments (service, environment, artifact, kind, started_us) VALUES (?, ?, ?, ?, ?)`,
		d.Service, d.Environment, d.Artifact, kind, d.started.UnixMicro())
	if err != nil {
		return result{}, err
	}
	d.ID, _ = res.LastInsertId()
	d.State = s.state(d)
	return result{http.StatusCreated, d}, bump(tx, effect)
}

func (s *Server) getDeployment(w http.ResponseWriter, r *http.Request) {
	d, err := scanDeployment(s.db.QueryRowContext(r.Context(), `SELECT `+deploymentColumns+` FROM deployments WHERE id = ?`,
		r.PathValue("id")))
	if errors.Is(err, sql.ErrNoRows) {
		answer(w, http.StatusNotFound, map[string]string{"error": "no such deployment"})
		return
	}
	if err != nil {
		answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	d.State = s.state(d)
	answer(w, http.StatusOK, d)
}

// rollback is an operation of its own (its own id), never a retry of a
// deployment: it cancels what is rolling out and rolls to_artifact out.
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	obj, err := decode(r)
	var d deployment
	if err == nil {
		d, _, err = deploymentFrom(obj, "to_artifact")
	}
	if err != nil {
		s.refused(w, err)
		return
	}
	s.write(w, r, func(tx *sql.Tx) (result, error) {
		if err := s.cancelActive(tx, d); err != nil {
			return result{}, err
		}
		return s.start(tx, d, "rollback", "rollbacks")
	})
}

// cancelActive cancels the environment's active rollouts (queued, running,
// or unknown), which a rollback replaces.
func (s *Server) cancelActive(tx *sql.Tx, d deployment) error {
	rows, err := tx.Query(`SELECT `+deploymentColumns+` FROM deployments WHERE service = ? AND environment = ?
		AND cancelled = 0`, d.Service, d.Environment)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		prev, err := scanDeployment(rows)
		if err != nil {
			rows.Close()
			return err
		}
		if s.active(prev) {
			ids = append(ids, prev.ID)
		}
	}
	rows.Close()
	for _, id := range ids {
		if _, err := tx.Exec(`UPDATE deployments SET cancelled = 1 WHERE id = ?`, id); err != nil {
			return err
		}
	}
	return rows.Err()
}
