package service

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Handler serves the service's API:
//
//	GET  /api/images            the library
//	GET  /api/groups            the groups of machines
//	GET  /api/casts             the queue, then the casts that are over
//	POST /api/casts             queue a cast (a Request as JSON)
//	POST /api/casts/{id}/abort  take a cast out of the queue, or stop it
//
// Reading needs nothing; queueing and aborting need the admin token, as
// "Authorization: Bearer TOKEN".
func (s *Service) Handler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/images", func(w http.ResponseWriter, r *http.Request) {
		imgs, err := s.cfg.Library.Images()
		if err != nil {
			fail(w, http.StatusInternalServerError, err)
			return
		}
		reply(w, http.StatusOK, imgs)
	})
	mux.HandleFunc("GET /api/groups", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, s.cfg.Groups)
	})
	mux.HandleFunc("GET /api/casts", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, s.Casts())
	})
	mux.HandleFunc("POST /api/casts", admin(token, func(w http.ResponseWriter, r *http.Request) {
		var req Request
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			fail(w, http.StatusBadRequest, errors.New("want a cast as JSON: {\"image\": NAME, \"group\": GROUP, \"nodes\": N, \"target\": DEV, \"plan\": \"auto\"}: "+err.Error()))
			return
		}
		c, err := s.Submit(req)
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		reply(w, http.StatusCreated, c)
	}))
	mux.HandleFunc("POST /api/casts/{id}/abort", admin(token, func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.PathValue("id"))
		if err != nil {
			fail(w, http.StatusBadRequest, errors.New("a cast's id is a number"))
			return
		}
		if err := s.Abort(id); err != nil {
			fail(w, http.StatusConflict, err)
			return
		}
		reply(w, http.StatusOK, map[string]string{"aborted": r.PathValue("id")})
	}))
	return mux
}

// admin lets through requests that carry the admin token; without a token
// configured, none.
func admin(token string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dolly-server"`)
			fail(w, http.StatusUnauthorized, errors.New("this needs the admin token (dolly-server -serve printed where it is): send it as Authorization: Bearer TOKEN"))
			return
		}
		h(w, r)
	}
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, err error) {
	reply(w, status, map[string]string{"error": err.Error()})
}
