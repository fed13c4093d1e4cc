package codec

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"go.temporal.io/sdk/converter"
)

// maxBody bounds one request: a page of history's payloads.
const maxBody = 64 << 20

// Handler is the codec server `starter codec-server` runs: the SDK's
// payload codec handler (POST …/encode, …/decode) over k, for whoever
// presents token, and for the browser at origin (the Temporal UI's),
// answered with CORS headers.
//
// Guarantees: nothing is encoded or decoded without the token, which is
// compared in constant time. It is presented as "Authorization: Bearer
// TOKEN" (what `temporal … --codec-auth 'Bearer TOKEN'` sends; the bare
// token is accepted too) or as the first segment of the path
// (http://host:port/TOKEN/decode), for the web UI, which sends no header of
// its own. A CORS preflight (OPTIONS) needs no token and reveals nothing.
// Another origin gets no CORS headers, so a browser keeps its pages out.
func Handler(k *Keys, token, origin string) http.Handler {
	inner := converter.NewPayloadCodecHTTPHandler(k)
	want := sha256.Sum256([]byte(token))
	matches := func(got string) bool {
		sum := sha256.Sum256([]byte(got))
		return got != "" && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && o == origin {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		auth := strings.TrimSpace(r.Header.Get("Authorization"))
		auth = strings.TrimSpace(strings.TrimPrefix(auth, "Bearer "))
		path := r.URL.Path
		if !matches(auth) {
			seg, rest, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
			if !ok || !matches(seg) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="capstan codec"`)
				http.Error(w, "a token is required: Authorization: Bearer TOKEN (CAPSTAN_CODEC_AUTH)", http.StatusUnauthorized)
				return
			}
			r = r.Clone(r.Context())
			r.URL.Path = "/" + rest
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		inner.ServeHTTP(w, r)
	})
}
