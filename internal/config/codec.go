package config

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// CodecKey is one AES-256 key of CAPSTAN_CODEC_KEYS: the id a payload
// records, and the key's 32 bytes.
type CodecKey struct {
	ID     string
	Secret []byte
}

// ParseCodecKeys reads CAPSTAN_CODEC_KEYS: `id:base64` pairs separated by
// commas, newest first. "" (unset) is no keys. Anything else that is not
// one or more such pairs, each id given once and each key 32 bytes of
// standard base64, is one sentence naming the setting — never quoting a
// key, nor an id that is one (a pair given key first).
func ParseCodecKeys(v string) ([]CodecKey, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	var keys []CodecKey
	seen := map[string]bool{}
	for i, pair := range strings.Split(v, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(pair), ":")
		id = strings.TrimSpace(id)
		switch {
		case !ok || id == "":
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: pair %d is not id:base64 (such as 2026-12:$(openssl rand -base64 32)), newest first, separated by commas", i+1)
		case looksLikeCodecKey(id):
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: pair %d gives its key before the colon; write id:base64, the id first", i+1)
		case strings.ContainsAny(id, " \t\"'\\"):
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: key id %q holds a space or quote; use letters, digits, dashes or dots", id)
		case len(id) > 64:
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: the key id of pair %d is longer than 64 characters", i+1)
		case seen[id]:
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: key id %q is listed twice; every key needs its own id", id)
		}
		secret, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil || len(secret) != 32 {
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: the key of id %q is not 32 bytes in standard base64 (make one with: openssl rand -base64 32)", id)
		}
		seen[id] = true
		keys = append(keys, CodecKey{ID: id, Secret: secret})
	}
	return keys, nil
}
