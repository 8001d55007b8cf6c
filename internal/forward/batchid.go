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
// SHA-256) derived only from the gateway, dataset, partition and seq range, so a chunk
// re-read after a crash, a rewind or a compaction carries the same id as the first time it
// was sent. Every string is length-prefixed, so ("a", "bc") and ("ab", "c") never meet.
//
// The result must stay the same forever: a `hyp server` may key its dedupe on it, and a
// daemon upgraded while a chunk is in flight re-sends that chunk under the new code.
// Changing the encoding breaks dedupe across upgrades; TestBatchIDGolden guards it.
func BatchID(gateway, dataset, partition string, first, last int64) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range [...]string{batchIDDomain, gateway, dataset, partition} {
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
