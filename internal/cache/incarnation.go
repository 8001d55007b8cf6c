package cache

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/partition"
)

// The incarnation file (layout.incarnation) names this cache's seq space (SPEC 2 and 5): a
// random id created together with the seq allocator, so that a wiped cache or a reinstalled
// machine, whose seqs start at 1 again, is never taken by a `hyp server` for the earlier seq
// space that used the same seqs.

// chooseIncarnation decides the id of the seq space, a pure function of what the cache holds:
//   - a fresh seq space (no seq issued anywhere: seq.json, the log and the tables all empty,
//     so the next seq is 1) gets a new random id, whatever file is left over: seqs that start
//     again at 1 under an old id would be taken for the old rows on the server;
//   - else the incarnation file (it is what every chunk was sent with);
//   - else the copy seq.json keeps, so losing one of the two files changes nothing;
//   - else "": a cache made before incarnations existed, whose chunks went out without the
//     header and which the server's ledger therefore knows as "". Giving it a new id would
//     let a rewind re-store rows the server already holds.
func chooseIncarnation(fresh bool, file, fromSeq *string) (id string, create bool) {
	switch {
	case fresh:
		return "", true
	case file != nil:
		return *file, false
	case fromSeq != nil:
		return *fromSeq, false
	default:
		return "", false
	}
}

// loadIncarnation applies chooseIncarnation and makes the choice durable in the incarnation
// file before any seq of the space is issued. A file that does not hold a valid id is an
// error, never replaced: replacing it would split one seq space into two on the server.
func (c *Cache) loadIncarnation(st seqState, fresh bool) error {
	path := layout(c.dir).incarnation()
	var file *string
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if id != "" {
			if err := partition.ValidateGateway(id); err != nil {
				return fmt.Errorf("%s: %w (restore the id this cache's rows were sent with, or remove the file to send as %q)", path, err, st.incarnation())
			}
		}
		file = &id
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read %s: %w", path, err)
	}
	id, create := chooseIncarnation(fresh, file, st.Incarnation)
	if create {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return fmt.Errorf("create incarnation: %w", err)
		}
		id = hex.EncodeToString(raw[:])
	}
	if file == nil || *file != id {
		if err := fsutil.WriteFileAtomic(path, []byte(id+"\n"), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	c.incarnation = id
	return nil
}

func (st seqState) incarnation() string {
	if st.Incarnation == nil {
		return ""
	}
	return *st.Incarnation
}

// Incarnation is the id of this cache's seq space ("" for a cache made before incarnations
// existed). It never changes while the cache is open.
func (c *Cache) Incarnation() string { return c.incarnation }
