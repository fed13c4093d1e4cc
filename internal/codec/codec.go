// Package codec encrypts what capstan keeps of a task's contents
// (docs/design.md §9.5): every payload Temporal stores (a PayloadCodec for
// the SDK's converter.NewCodecDataConverter), and the ledger's stored
// contents (a ledger.Sealer). Both use AES-256-GCM with the keys of
// CAPSTAN_CODEC_KEYS.
//
// Guarantees:
//   - Encoding uses the first key and records its id in the clear: in the
//     payload's metadata (MetadataKeyID), in the ledger's envelope header.
//   - Decoding uses whichever listed key the record names; a key that is
//     not listed is an *UnknownKeyError (errors.Is ErrUnknownKey) naming
//     the id, never a silent pass-through.
//   - A payload or ledger value that is not encrypted (written before keys
//     were set) decodes as it is, so turning encryption on keeps old tasks
//     readable.
//   - Every encryption has a fresh random nonce, and the key id is
//     authenticated with the ciphertext: an altered id, nonce or text is an
//     error, never wrong plaintext.
package codec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/config"
)

const (
	// Encoding is the metadata "encoding" of an encrypted payload.
	Encoding = "binary/encrypted"
	// MetadataKeyID is the payload metadata key naming the key that
	// encrypted it.
	MetadataKeyID = "encryption-key-id"
	// MetadataCipher names the cipher, for whoever reads history by hand.
	MetadataCipher = "encryption-cipher"
	cipherName     = "AES-256-GCM"
)

// ErrUnknownKey: the record was encrypted with a key CAPSTAN_CODEC_KEYS
// does not list. An *UnknownKeyError names it.
var ErrUnknownKey = errors.New("codec: encrypted with a key that is not listed")

// ErrCorrupt: an encrypted record that cannot be authenticated (altered,
// truncated, or encrypted by another key under the same id).
var ErrCorrupt = errors.New("codec: encrypted record does not authenticate")

// UnknownKeyError is a record encrypted with key ID, which is not listed.
type UnknownKeyError struct{ ID string }

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("this data is encrypted with key id %q, which CAPSTAN_CODEC_KEYS does not list: add that key (after the current one) to decrypt it", e.ID)
}

// Is makes errors.Is(err, ErrUnknownKey) true.
func (e *UnknownKeyError) Is(target error) bool { return target == ErrUnknownKey }

// Keys encrypts with the first of its keys and decrypts with any. A nil
// *Keys is not valid; New returns nil for no keys, and callers then leave
// everything plain.
type Keys struct {
	first string
	byID  map[string]cipher.AEAD
}

// New makes Keys of keys, newest first; nil when keys is empty.
func New(keys []config.CodecKey) (*Keys, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	k := &Keys{first: keys[0].ID, byID: make(map[string]cipher.AEAD, len(keys))}
	for _, key := range keys {
		block, err := aes.NewCipher(key.Secret)
		if err != nil {
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: key id %q: %w", key.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("CAPSTAN_CODEC_KEYS: key id %q: %w", key.ID, err)
		}
		k.byID[key.ID] = aead
	}
	return k, nil
}

// CurrentID is the id of the key that encrypts.
func (k *Keys) CurrentID() string { return k.first }

// seal encrypts plain under the first key, binding aad: nonce || ciphertext.
func (k *Keys) seal(plain, aad []byte) []byte {
	aead := k.byID[k.first]
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		panic("codec: no randomness: " + err.Error()) // crypto/rand never fails on supported platforms
	}
	return aead.Seal(out, out, plain, aad)
}

// open decrypts nonce || ciphertext written by seal under key id.
func (k *Keys) open(id string, data, aad []byte) ([]byte, error) {
	aead, ok := k.byID[id]
	if !ok {
		return nil, &UnknownKeyError{ID: id}
	}
	if len(data) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: key id %q, %d bytes", ErrCorrupt, id, len(data))
	}
	plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("%w: key id %q", ErrCorrupt, id)
	}
	return plain, nil
}

// Encode implements converter.PayloadCodec: each payload, marshalled
// whole (its metadata too), becomes the data of an encrypted payload.
func (k *Keys) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := p.Marshal()
		if err != nil {
			return nil, fmt.Errorf("codec: marshal payload: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(Encoding),
				MetadataKeyID:              []byte(k.first),
				MetadataCipher:             []byte(cipherName),
			},
			Data: k.seal(plain, []byte(k.first)),
		}
	}
	return out, nil
}

// Decode implements converter.PayloadCodec. A payload that is not
// encrypted is returned as it is.
func (k *Keys) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != Encoding {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		plain, err := k.open(id, p.GetData(), []byte(id))
		if err != nil {
			return nil, err
		}
		var decoded commonpb.Payload
		if err := decoded.Unmarshal(plain); err != nil {
			return nil, fmt.Errorf("%w: key id %q: %v", ErrCorrupt, id, err)
		}
		out[i] = &decoded
	}
	return out, nil
}

// sealedMagic starts every value Seal writes. No plaintext the ledger
// stores starts with a NUL byte (JSON documents and their items), so a
// value without it is one written before keys were set.
var sealedMagic = []byte("\x00capstan-sealed-v1\x00")

// Seal implements ledger.Sealer: magic, the key id's length and the id,
// then nonce || ciphertext, the header authenticated.
func (k *Keys) Seal(plain []byte) ([]byte, error) {
	header := append(append(bytes.Clone(sealedMagic), byte(len(k.first))), k.first...)
	return append(header, k.seal(plain, header)...), nil
}

// Open implements ledger.Sealer: a value Seal wrote is decrypted; any
// other is returned as it is (a row written before keys were set).
func (k *Keys) Open(stored []byte) ([]byte, error) {
	return openSealed(k, stored)
}

// openSealed is Open, and for a nil k (no keys) the refusal of a sealed
// value.
func openSealed(k *Keys, stored []byte) ([]byte, error) {
	if !bytes.HasPrefix(stored, sealedMagic) {
		return stored, nil
	}
	rest := stored[len(sealedMagic):]
	if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
		return nil, fmt.Errorf("%w: truncated header", ErrCorrupt)
	}
	id := string(rest[1 : 1+int(rest[0])])
	header := stored[:len(sealedMagic)+1+len(id)]
	if k == nil {
		return nil, &UnknownKeyError{ID: id}
	}
	return k.open(id, stored[len(header):], header)
}

// IsSealed reports whether stored is a value Seal wrote.
func IsSealed(stored []byte) bool { return bytes.HasPrefix(stored, sealedMagic) }

// PayloadCodec is k as the SDK's payload codec, or nil (no codec: payloads
// stay plain) when k is nil.
func PayloadCodec(k *Keys) converter.PayloadCodec {
	if k == nil {
		return nil
	}
	return k
}

// Sealer is k as the ledger's sealer. Without keys (k nil) it stores
// values as they are and refuses to read a sealed one with the
// *UnknownKeyError naming its key, rather than hand ciphertext on.
func Sealer(k *Keys) interface {
	Seal([]byte) ([]byte, error)
	Open([]byte) ([]byte, error)
} {
	if k == nil {
		return noKeys{}
	}
	return k
}

type noKeys struct{}

func (noKeys) Seal(plain []byte) ([]byte, error)  { return plain, nil }
func (noKeys) Open(stored []byte) ([]byte, error) { return openSealed(nil, stored) }
