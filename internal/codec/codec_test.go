package codec_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/config"
)

func key(t *testing.T, id string) config.CodecKey {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return config.CodecKey{ID: id, Secret: b}
}

func keys(t *testing.T, list ...config.CodecKey) *codec.Keys {
	t.Helper()
	k, err := codec.New(list)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A payload encrypted with the old key decodes after a rotation (new key
// first); the new key encrypts; a key not listed is one error naming it.
func TestPayloadRotationAndMissingKey(t *testing.T) {
	oldK, newK := key(t, "old"), key(t, "new")
	before := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), keys(t, oldK))
	p, err := before.ToPayload("the prompt: fix the flaky test")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(p.Data, []byte("flaky")) || string(p.Metadata["encryption-key-id"]) != "old" || string(p.Metadata["encoding"]) != codec.Encoding {
		t.Fatalf("encoded payload %v is not encrypted under key old", p)
	}
	after := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), keys(t, newK, oldK))
	var s string
	if err := after.FromPayload(p, &s); err != nil || s != "the prompt: fix the flaky test" {
		t.Fatalf("after rotation: %q, %v", s, err)
	}
	p2, _ := after.ToPayload("x")
	if string(p2.Metadata["encryption-key-id"]) != "new" {
		t.Fatalf("after rotation the key id is %q, want new", p2.Metadata["encryption-key-id"])
	}
	onlyNew := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), keys(t, newK))
	err = onlyNew.FromPayload(p, &s)
	var uk *codec.UnknownKeyError
	if !errors.As(err, &uk) || uk.ID != "old" || !errors.Is(err, codec.ErrUnknownKey) || !strings.Contains(err.Error(), `"old"`) {
		t.Fatalf("decode with the key gone: %v; want an UnknownKeyError naming old", err)
	}
	// A plain payload (written before keys were set) decodes as it is.
	plain, _ := converter.GetDefaultDataConverter().ToPayload("plain")
	if err := after.FromPayload(plain, &s); err != nil || s != "plain" {
		t.Fatalf("plain payload: %q, %v", s, err)
	}
	// An altered payload is an error, never other plaintext.
	p.Data[len(p.Data)-1] ^= 1
	if err := after.FromPayload(p, &s); !errors.Is(err, codec.ErrCorrupt) {
		t.Fatalf("altered payload: %v, want ErrCorrupt", err)
	}
}

func TestParseCodecKeys(t *testing.T) {
	k := base64.StdEncoding.EncodeToString(make([]byte, 32))
	got, err := config.ParseCodecKeys(" b:" + k + " , a:" + k)
	if err != nil || len(got) != 2 || got[0].ID != "b" || got[1].ID != "a" {
		t.Fatalf("ParseCodecKeys = %v, %v", got, err)
	}
	if got, err := config.ParseCodecKeys(""); err != nil || got != nil {
		t.Fatalf("unset: %v, %v", got, err)
	}
	for _, bad := range []string{"nokey", ":" + k, "a:" + k + ",a:" + k, "a:c2hvcnQ=", "a:!!!", "a b:" + k} {
		_, err := config.ParseCodecKeys(bad)
		if err == nil || !strings.HasPrefix(err.Error(), "CAPSTAN_CODEC_KEYS") || strings.Contains(err.Error(), k) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseCodecKeys(%q) = %v; want one sentence naming the setting, never the key", bad, err)
		}
	}
}
