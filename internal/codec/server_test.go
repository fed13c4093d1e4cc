package codec_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/codec"
)

// The codec server decodes only for the token, in a header or as the
// path's first segment, and answers CORS for the UI's origin alone.
func TestHandlerAuthAndCORS(t *testing.T) {
	k := keys(t, key(t, "k1"))
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), k)
	p, _ := dc.ToPayload("model text")
	srv := httptest.NewServer(codec.Handler(k, "s3cret", "http://localhost:8233"))
	defer srv.Close()
	remote := func(endpoint string, headers map[string]string) converter.DataConverter {
		return converter.NewRemoteDataConverter(converter.GetDefaultDataConverter(), converter.RemoteDataConverterOptions{
			Endpoint: endpoint, ModifyRequest: func(r *http.Request) error {
				for k, v := range headers {
					r.Header.Set(k, v)
				}
				return nil
			}})
	}
	var s string
	if err := remote(srv.URL, map[string]string{"Authorization": "Bearer s3cret"}).FromPayload(p, &s); err != nil || s != "model text" {
		t.Fatalf("with the token in the header: %q, %v", s, err)
	}
	s = ""
	if err := remote(srv.URL+"/s3cret", nil).FromPayload(p, &s); err != nil || s != "model text" {
		t.Fatalf("with the token in the path: %q, %v", s, err)
	}
	for name, h := range map[string]map[string]string{"none": nil, "wrong": {"Authorization": "Bearer s3cre"}} {
		if err := remote(srv.URL, h).FromPayload(p, &s); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			t.Errorf("token %s: %v; want 401", name, err)
		}
	}
	req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/decode", nil)
	req.Header.Set("Origin", "http://localhost:8233")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:8233" {
		t.Fatalf("preflight from the UI: %v %v", resp, err)
	}
	req.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin got CORS headers: %v %v", resp.Header, err)
	}
}
