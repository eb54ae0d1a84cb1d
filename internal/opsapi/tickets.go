package opsapi

import (
	"database/sql"
	"errors"
	"net/http"
	"slices"
	"strconv"
)

func (s *Server) routeTickets(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tickets", s.createTicket)
	mux.HandleFunc("POST /v1/tickets/{id}/comments", s.addComment)
	mux.HandleFunc("PUT /v1/tickets/{id}/status", s.setStatus)
	mux.HandleFunc("GET /v1/tickets/{id}", s.getTicket)
}

type ticket struct {
	ID            int64  `json:"id"`
	Project       string `json:"project"`
	Title         string `json:"title"`
	Priority      int64  `json:"priority"`
	Description   string `json:"description"`
	SourceEventID string `json:"source_event_id,omitempty"`
	Status        string `json:"status"`
	Created       *bool  `json:"created,omitempty"`
}

// createTicket: a source_event_id is unique per project (one ticket per
// alert), unless naive.
func (s *Server) createTicket(w http.ResponseWriter, r *http.Request) {
	obj, err := decode(r)
	if err != nil {
		s.refused(w, err)
		return
	}
	t, err := ticketFrom(obj)
	if err != nil {
		s.refused(w, err)
		return
	}
	s.write(w, r, func(tx *sql.Tx) (result, error) {
		if t.SourceEventID != "" && !s.opts.Naive {
			var existing ticket
			err := tx.QueryRow(`SELECT id, project, title, priority, description, source_event_id, status FROM tickets
				WHERE project = ? AND source_event_id = ?`, t.Project, t.SourceEventID).Scan(&existing.ID,
				&existing.Project, &existing.Title, &existing.Priority, &existing.Description, &existing.SourceEventID,
				&existing.Status)
			if err == nil {
				created := false
				existing.Created = &created
				return result{http.StatusOK, existing}, nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return result{}, err
			}
		}
		res, err := tx.Exec(`INSERT INTO tickets (project, title, priority, description, source_event_id, status)
			VALUES (?, ?, ?, ?, nullif(?, ''), 'open')`, t.Project, t.Title, t.Priority, t.Description, t.SourceEventID)
		if err != nil {
			return result{}, err
		}
		t.ID, _ = res.LastInsertId()
		t.Status = "open"
		created := true
		t.Created = &created
		return result{http.StatusCreated, t}, bump(tx, "tickets_created")
	})
}

func ticketFrom(obj map[string]any) (ticket, error) {
	var t ticket
	var err error
	if t.Project, err = str(obj, "project", true); err != nil {
		return t, err
	}
	if t.Title, err = str(obj, "title", true); err != nil {
		return t, err
	}
	if t.Description, err = str(obj, "description", false); err != nil {
		return t, err
	}
	if t.SourceEventID, err = str(obj, "source_event_id", false); err != nil {
		return t, err
	}
	t.Priority = 3
	if _, ok := obj["priority"]; ok {
		if t.Priority, err = integer(obj, "priority"); err != nil {
			return t, err
		}
	}
	return t, nil
}

func (s *Server) refused(w http.ResponseWriter, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		answer(w, ae.status, map[string]string{"error": ae.msg})
		return
	}
	answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
}

// addComment: a client-chosen comment_id makes a repeat a no-op, unless naive.
func (s *Server) addComment(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	obj, err := decode(r)
	if err != nil {
		s.refused(w, err)
		return
	}
	commentID, err := str(obj, "comment_id", true)
	if err != nil {
		s.refused(w, err)
		return
	}
	body, err := str(obj, "body", true)
	if err != nil {
		s.refused(w, err)
		return
	}
	s.write(w, r, func(tx *sql.Tx) (result, error) {
		if err := ticketExists(tx, id); err != nil {
			return result{}, err
		}
		if !s.opts.Naive {
			var n int
			if err := tx.QueryRow(`SELECT count(*) FROM comments WHERE ticket_id = ? AND comment_id = ?`, id, commentID).Scan(&n); err != nil {
				return result{}, err
			}
			if n > 0 {
				return result{http.StatusOK, map[string]any{"comment_id": commentID, "added": false}}, nil
			}
		}
		if _, err := tx.Exec(`INSERT INTO comments (ticket_id, comment_id, body) VALUES (?, ?, ?)`, id, commentID, body); err != nil {
			return result{}, err
		}
		return result{http.StatusCreated, map[string]any{"comment_id": commentID, "added": true}}, bump(tx, "comments_added")
	})
}

func ticketExists(tx *sql.Tx, id int64) error {
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM tickets WHERE id = ?`, id).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return refuse(http.StatusNotFound, "no ticket %d", id)
	}
	return nil
}

var ticketStatuses = []string{"open", "in_progress", "resolved", "closed"}

// setStatus sets a desired final state: repeating it changes nothing.
func (s *Server) setStatus(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	obj, err := decode(r)
	if err != nil {
		s.refused(w, err)
		return
	}
	status, err := str(obj, "status", true)
	if err == nil && !slices.Contains(ticketStatuses, status) {
		err = refuse(http.StatusUnprocessableEntity, "status must be one of %v", ticketStatuses)
	}
	if err != nil {
		s.refused(w, err)
		return
	}
	s.write(w, r, func(tx *sql.Tx) (result, error) {
		if err := ticketExists(tx, id); err != nil {
			return result{}, err
		}
		if _, err := tx.Exec(`UPDATE tickets SET status = ? WHERE id = ?`, status, id); err != nil {
			return result{}, err
		}
		return result{http.StatusOK, map[string]any{"id": id, "status": status}}, nil
	})
}

func (s *Server) getTicket(w http.ResponseWriter, r *http.Request) {
	var t ticket
	var src sql.NullString
	err := s.db.QueryRowContext(r.Context(), `SELECT id, project, title, priority, description, source_event_id, status
		FROM tickets WHERE id = ?`, r.PathValue("id")).Scan(&t.ID, &t.Project, &t.Title, &t.Priority, &t.Description, &src, &t.Status)
	if errors.Is(err, sql.ErrNoRows) {
		answer(w, http.StatusNotFound, map[string]string{"error": "no such ticket"})
		return
	}
	if err != nil {
		answer(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	t.SourceEventID = src.String
	answer(w, http.StatusOK, t)
}
