package forward

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// batchIDDomain separates these hashes from every other SHA-256 in the product, and names
// the encoding version so that a deliberate future change would at least be visible.
const batchIDDomain = "hyp.forward.batch-id.v1"

// BatchID is the X-Hyp-Batch-Id of a chunk: 32 hex characters (the first 16 bytes of a
// SHA-256) derived only from the gateway, the incarnation (the id of the sender's seq space,
// SPEC 5), dataset, partition and seq range, so a chunk re-read after a crash, a rewind or a
// compaction carries the same id as the first time it was sent, and a reinstalled machine
// whose seqs start again at 1 never repeats an id of its earlier life. Every string is
// length-prefixed, so ("a", "bc") and ("ab", "c") never meet.
//
// The incarnation "" (a cache made before incarnations) is left out of the hash, so such a
// home's ids are the ones it had before incarnations existed.
//
// The result must stay the same forever: a `hyp server` may key its dedupe on it, and a
// daemon upgraded while a chunk is in flight re-sends that chunk under the new code.
// Changing the encoding breaks dedupe across upgrades; TestBatchIDGolden guards it.
func BatchID(gateway, incarnation, dataset, partition string, first, last int64) string {
	h := sha256.New()
	var n [8]byte
	parts := []string{batchIDDomain, gateway, dataset, partition}
	if incarnation != "" {
		parts = append(parts, incarnation)
	}
	for _, s := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, v := range [...]int64{first, last} {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
