package label

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/triagegw/triage/internal/netaddr"
)

//go:embed page/index.html page/app.js page/app.css
var page embed.FS

// Handler serves the labelling page and its API for s:
//
//	GET  /            the page (HTML, with /app.js and /app.css)
//	GET  /api/state   the State
//	POST /api/act     {"action": "label"|"unsure"|"skip"|"undo", "id": ..., "label": ...} → the State
//
// The page shows prompts, so the handler answers only requests whose Host
// is a loopback name or address (a page elsewhere cannot read it through
// a DNS name that points here) unless remote is set, and takes actions
// only as JSON from the page's own origin (a page elsewhere cannot post
// labels either).
func Handler(s *Session, remote bool) http.Handler {
	mux := http.NewServeMux()
	asset := func(name, typ string) http.HandlerFunc {
		b, err := page.ReadFile("page/" + name)
		if err != nil {
			panic(err) // embedded: present at build time
		}
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", typ)
			w.Write(b)
		}
	}
	mux.HandleFunc("GET /{$}", asset("index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /app.js", asset("app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /app.css", asset("app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) { writeState(w, http.StatusOK, s.State(), "") })
	mux.HandleFunc("POST /api/act", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			http.Error(w, "actions are JSON (Content-Type: application/json)", http.StatusUnsupportedMediaType)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			http.Error(w, "actions come from the page itself", http.StatusForbidden)
			return
		}
		var a struct{ Action, ID, Label string }
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&a); err != nil {
			http.Error(w, "bad action: "+err.Error(), http.StatusBadRequest)
			return
		}
		var err error
		switch a.Action {
		case "label":
			err = s.Label(a.ID, a.Label)
		case "unsure":
			err = s.Unsure(a.ID)
		case "skip":
			err = s.Skip(a.ID)
		case "undo":
			_, err = s.Undo()
		default:
			http.Error(w, "unknown action "+a.Action, http.StatusBadRequest)
			return
		}
		switch {
		case errors.Is(err, ErrStale):
			writeState(w, http.StatusConflict, s.State(), err.Error())
		case err != nil:
			writeState(w, http.StatusInternalServerError, s.State(), err.Error())
		default:
			writeState(w, http.StatusOK, s.State(), "")
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !remote && !netaddr.Loopback(r.Host) {
			http.Error(w, "this page answers on a loopback address only", http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

func writeState(w http.ResponseWriter, code int, st State, errMsg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(struct {
		State
		Error string `json:"error,omitempty"`
	}{st, errMsg})
}

// Serve serves h on ln until ctx ends, then shuts down within 5 seconds.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
