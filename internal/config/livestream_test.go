package config_test

import (
	"strings"
	"testing"
	"time"

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
	if ls.Token != "" || ls.MaxConns != config.DefaultStreamMaxConns || ls.WriteTimeout != config.DefaultStreamWriteTimeout {
		t.Errorf("default guards = %+v; want no token, %d connections, %s writes", ls, config.DefaultStreamMaxConns, config.DefaultStreamWriteTimeout)
	}
	ls, err = config.LiveStreamFromLookupEnv(env("CAPSTAN_STREAM_TOKEN", " t0ken ", "CAPSTAN_STREAM_MAX_CONNS", "12", "CAPSTAN_STREAM_WRITE_TIMEOUT", "3s"))
	if err != nil || ls.Token != "t0ken" || ls.MaxConns != 12 || ls.WriteTimeout != 3*time.Second {
		t.Errorf("guards set = %+v, %v; want token t0ken, 12 connections, 3s writes", ls, err)
	}
	if c := config.FromLookupEnv(env("CAPSTAN_STREAM_TOKEN", "t0ken")); c.StreamToken != "t0ken" {
		t.Errorf("Config.StreamToken = %q, want the follower's token", c.StreamToken)
	}
	for addr, want := range map[string]bool{"127.0.0.1:9465": true, "localhost:0": true, "[::1]:9465": true, ":9465": false, "10.0.0.2:9465": false} {
		if got := (config.LiveStream{Addr: addr}).Loopback(); got != want {
			t.Errorf("Loopback(%s) = %v, want %v", addr, got, want)
		}
	}
	for _, tc := range []struct{ key, value, want string }{
		{"CAPSTAN_STREAM_ADDR", "9465", `CAPSTAN_STREAM_ADDR="9465" is not host:port`},
		{"CAPSTAN_STREAM_URL", "worker-1:9465", `CAPSTAN_STREAM_URL="worker-1:9465" is not an http(s) URL`},
		{"CAPSTAN_STREAM_MAX_CONNS", "0", `CAPSTAN_STREAM_MAX_CONNS="0" is not a whole number of at least 1`},
		{"CAPSTAN_STREAM_WRITE_TIMEOUT", "10", `CAPSTAN_STREAM_WRITE_TIMEOUT="10" is not a positive Go duration`},
	} {
		if _, err := config.LiveStreamFromLookupEnv(env(tc.key, tc.value)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}
