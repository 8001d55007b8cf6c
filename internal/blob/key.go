package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Layout is how a key names the partition's directories.
type Layout int

const (
	// LayoutPlain is the layout of units decided before LayoutReserved: `source=<s>`, the
	// partition's own keys. A Hive-aware reader shows the directory's value in place of a
	// row's own `source` field, so only units whose intent already named it keep it.
	LayoutPlain Layout = iota
	// LayoutReserved puts the directory keys in hyp's reserved namespace (SPEC 6):
	// `_hyp_source=<s>` (and `_hyp_gateway=<id>` on a server), which no user column can be.
	LayoutReserved
)

// Key is the object key of an export unit, relative to the destination's root (a LocalFS
// directory, or an S3 bucket and prefix, which the S3 destination adds itself):
//
//	<dataset>/<partition path>/part-<first>-<last>.<ext>
//
// with first and last zero-padded to 20 digits so keys sort in seq order. partition is a
// partition name such as `source=web` or `gateway=abc123/source=web`; each `k=v` component
// becomes one Hive-style path segment (its key prefixed `_hyp_` in LayoutReserved) whose value
// is escaped (see segment), so two different partitions never share a key and no value can
// climb out of its directory.
func Key(dataset, partition string, first, last int64, f Format, l Layout) string {
	parts := []string{escape(dataset)}
	for _, c := range splitPartition(partition) {
		if l == LayoutReserved {
			c = "_hyp_" + c
		}
		parts = append(parts, segment(c))
	}
	parts = append(parts, fmt.Sprintf("part-%020d-%020d.%s", first, last, f.Ext()))
	return strings.Join(parts, "/")
}

// splitPartition cuts a partition name into its `k=v` components. A source value may hold
// '/', so the cut stops at the first component that is `source=`: it is always the last one,
// and the components before it (a gateway id) never hold '/'.
func splitPartition(p string) []string {
	var out []string
	for {
		if strings.HasPrefix(p, "source=") {
			return append(out, p)
		}
		i := strings.IndexByte(p, '/')
		if i < 0 {
			return append(out, p)
		}
		out = append(out, p[:i])
		p = p[i+1:]
	}
}

// maxSegment is the longest name common filesystems accept (NAME_MAX).
const maxSegment = 255

// segment turns one `k=v` partition component into a path segment `k=<escaped v>`. A value
// whose escape would not fit in one file name becomes `~h` and the SHA-256 of the value:
// '~' never survives escaping, so a hashed segment cannot equal an escaped one.
func segment(component string) string {
	k, v, ok := strings.Cut(component, "=")
	if !ok {
		return escape(component)
	}
	seg := escape(k) + "=" + escape(v)
	if len(seg) > maxSegment {
		sum := sha256.Sum256([]byte(v))
		seg = escape(k) + "=~h" + hex.EncodeToString(sum[:])
	}
	return seg
}

const upperHex = "0123456789ABCDEF"

// escape keeps [A-Za-z0-9_.-] and writes every other byte as %XX, the escaping Hive-style
// readers (Spark, DuckDB, pyarrow) undo when they read partition values from paths. A
// leading '.' is escaped too, so no segment is "." or "..", nor hidden from directory
// listings and globs.
func escape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' && i > 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xf])
	}
	return b.String()
}
