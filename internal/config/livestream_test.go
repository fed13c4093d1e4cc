package config_test

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/config"
)

func TestLiveStreamAddressAndURL(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	ls, err := config.LiveStreamFromLookupEnv(env())
	if err != nil || ls.Addr != config.DefaultStreamAddr || ls.URL != "" {
		t.Fatalf("default = %+v, %v; want %s and no URL", ls, err, config.DefaultStreamAddr)
	}
	if got := ls.AdvertisedURL("127.0.0.1:9465"); got != "http://127.0.0.1:9465" {
		t.Errorf("AdvertisedURL = %q, want the loopback address", got)
	}
	if got := (config.LiveStream{Addr: ":9465"}).AdvertisedURL("[::]:9465"); got != "http://"+config.Hostname()+":9465" {
		t.Errorf("AdvertisedURL of every interface = %q, want this host's name", got)
	}
	if ls, err := config.LiveStreamFromLookupEnv(env("CAPSTAN_STREAM_ADDR", "")); err != nil || ls.Addr != "" {
		t.Errorf("empty CAPSTAN_STREAM_ADDR = %+v, %v; want off", ls, err)
	}
	ls, err = config.LiveStreamFromLookupEnv(env("CAPSTAN_STREAM_URL", "http://worker-1:9465/"))
	if err != nil || ls.AdvertisedURL("127.0.0.1:9465") != "http://worker-1:9465" {
		t.Errorf("CAPSTAN_STREAM_URL = %+v, %v; want it advertised as given", ls, err)
	}
	for _, tc := range []struct{ key, value, want string }{
		{"CAPSTAN_STREAM_ADDR", "9465", `CAPSTAN_STREAM_ADDR="9465" is not host:port`},
		{"CAPSTAN_STREAM_URL", "worker-1:9465", `CAPSTAN_STREAM_URL="worker-1:9465" is not an http(s) URL`},
	} {
		if _, err := config.LiveStreamFromLookupEnv(env(tc.key, tc.value)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}
