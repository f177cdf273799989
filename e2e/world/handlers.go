package world

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
)

// apiHandler is the internal API: GET /v1/items/{id} answers when the
// request carries "Authorization: Bearer <APIToken>" (which the appliance
// injects; the sandbox never has it). The answer says only whether the
// credential was right, never its value. POST /v1/items creates (and is
// recorded: a test asserts it never arrived). GET /v1/items/echo is a
// careless endpoint: it answers with the request's header fields, the
// credential among them, gzip-compressed when the client accepts it.
func (w *World) apiHandler() http.Handler {
	want := "Bearer " + w.APIToken
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(rw http.ResponseWriter, r *http.Request) {
		status, auth := http.StatusOK, "ok"
		switch got := r.Header.Get("Authorization"); {
		case got == "":
			status, auth = http.StatusUnauthorized, "missing"
		case got != want:
			status, auth = http.StatusUnauthorized, "wrong"
		}
		writeJSON(rw, status, map[string]string{"id": r.PathValue("id"), "name": "item-" + r.PathValue("id"), "auth": auth})
	})
	mux.HandleFunc("GET /v1/items/echo", func(rw http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(map[string]any{"headers": r.Header})
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			rw.Write(b)
			return
		}
		rw.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(rw)
		zw.Write(b)
		zw.Close()
	})
	mux.HandleFunc("POST /v1/items", func(rw http.ResponseWriter, r *http.Request) {
		writeJSON(rw, http.StatusCreated, map[string]string{"created": "yes"})
	})
	return mux
}

// hooksHandler accepts a POST on any path: a test asserts which paths
// arrived, so the server itself refuses nothing.
func hooksHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeJSON(rw, http.StatusMethodNotAllowed, map[string]string{"error": "POST only"})
			return
		}
		writeJSON(rw, http.StatusOK, map[string]string{"received": r.URL.Path})
	})
}

// EvilBody is what the evil server answers; seeing it in a sandbox means
// a request got through.
const EvilBody = "EVIL-SERVER-REACHED"

func evilHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/dns-query") {
			rw.Header().Set("Content-Type", "application/dns-message")
		}
		_, _ = rw.Write([]byte(EvilBody + "\n"))
	})
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}
