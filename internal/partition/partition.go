// Package partition owns the naming of cache partitions: the name `source=<value>` (on a
// central server `gateway=<id>/source=<value>`), its validation, and the reversible escaping
// that turns a name into one safe path segment. A partition's name is its identity
// everywhere: cache tables, watermarks, metrics. It never touches the filesystem.
package partition

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxSourceBytes bounds a source value (SPEC 2).
const MaxSourceBytes = 200

// Unknown is the source of rows that name none.
const Unknown = "unknown"

// ValidateSource reports why s cannot be a source value, or nil.
func ValidateSource(s string) error {
	if s == "" {
		return fmt.Errorf("source is empty")
	}
	if len(s) > MaxSourceBytes {
		return fmt.Errorf("source is %d bytes, more than %d", len(s), MaxSourceBytes)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("source is not valid UTF-8")
	}
	for _, r := range s {
		if isControl(r) {
			return fmt.Errorf("source contains control character %U", r)
		}
	}
	return nil
}

// SanitizeSource maps any string to a valid source value, for sources a client names
// without asking (an OTLP resource's service.name), where refusing the request over its
// label, or filing it under Unknown, would lose the name. Invalid UTF-8 and control
// characters become U+FFFD, then the value is cut at a character boundary to
// MaxSourceBytes. A valid value comes back unchanged, the mapping is deterministic, and an
// empty value is Unknown. Distinct values can meet (two long names sharing their first 200
// bytes share a partition); that is the price of keeping the readable name.
func SanitizeSource(s string) string {
	if s == "" {
		return Unknown
	}
	if ValidateSource(s) == nil {
		return s
	}
	var b strings.Builder
	for _, r := range s { // ranging over invalid UTF-8 yields utf8.RuneError, U+FFFD
		if isControl(r) {
			r = utf8.RuneError
		}
		if b.Len()+utf8.RuneLen(r) > MaxSourceBytes {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isControl reports the characters SPEC 2 keeps out of source values: C0, DEL and C1.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// Name is the partition name shown to operators: `source=<value>`.
func Name(source string) string { return "source=" + source }

// SourceFromName parses `source=<value>`.
func SourceFromName(name string) (string, bool) {
	s, ok := strings.CutPrefix(name, "source=")
	if !ok || ValidateSource(s) != nil {
		return "", false
	}
	return s, true
}

// MaxGatewayBytes bounds a gateway id.
const MaxGatewayBytes = 128

// ValidateGateway reports why id cannot be a gateway id, or nil: SPEC 5's
// `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, the same rule for a configured `gateway_id` and a
// generated one. Ids are plain tokens so that a gateway partition name needs no escaping of
// its own; the leading letter or digit keeps `.` and `..` out of paths.
func ValidateGateway(id string) error {
	if id == "" || len(id) > MaxGatewayBytes {
		return fmt.Errorf("gateway id must be 1 to %d bytes", MaxGatewayBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("gateway id %q must start with a letter or digit and hold only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

// GatewayName is the name of a central server's partition for rows a gateway forwarded.
func GatewayName(gateway, source string) string {
	return "gateway=" + gateway + "/" + Name(source)
}

// Parse splits a partition name into its gateway (empty for a local partition) and source,
// validating both.
func Parse(name string) (gateway, source string, err error) {
	rest := name
	if g, ok := strings.CutPrefix(name, "gateway="); ok {
		var found bool
		gateway, rest, found = strings.Cut(g, "/")
		if !found {
			return "", "", fmt.Errorf("partition %q: want gateway=<id>/source=<value>", name)
		}
		if err := ValidateGateway(gateway); err != nil {
			return "", "", fmt.Errorf("partition %q: %w", name, err)
		}
	}
	s, ok := strings.CutPrefix(rest, "source=")
	if !ok {
		return "", "", fmt.Errorf("partition %q: want source=<value>", name)
	}
	if err := ValidateSource(s); err != nil {
		return "", "", fmt.Errorf("partition %q: %w", name, err)
	}
	return gateway, s, nil
}

// PathSegment is the directory name for a valid partition name: Segment of its source,
// prefixed by `gateway=<id>,` on a central server (',' never occurs in an escaped source or
// a gateway id, so the segment stays unambiguous).
func PathSegment(name string) (string, error) {
	gw, src, err := Parse(name)
	if err != nil {
		return "", err
	}
	if gw == "" {
		return Segment(src), nil
	}
	seg := "gateway=" + gw + "," + Segment(src)
	if len(seg) > maxNameSegment {
		// A 128-byte gateway id and a 200-byte source would make a name no filesystem
		// takes, and the first row of such a partition would fail every flush.
		sum := sha256.Sum256([]byte(name))
		return "gateway~h" + hex.EncodeToString(sum[:16]), nil
	}
	return seg, nil
}

// maxNameSegment bounds a server partition's segment so that the longest name made from it
// (a watermark's temp file: "." + segment + ".json.tmp-" and ten digits) stays within the
// 255 bytes of common filesystems; shorter ones are as they always were.
const maxNameSegment = 230

// maxSegment keeps an escaped segment well under the 255-byte name limit of common
// filesystems, leaving room for suffixes such as ".json".
const maxSegment = 200

// Segment returns the path segment for a source: `source=` followed by the value with every
// byte outside [A-Za-z0-9_-] (and a leading '.') written as `~XX`. `~` is used instead of
// `%` because Iceberg turns table paths into URLs, where `%XX` would be decoded. Values whose
// escape would be too long become `source~h<sha256>`; the partition's directory records the
// raw value, so the mapping stays reversible through that record.
func Segment(source string) string {
	var b strings.Builder
	b.WriteString("source=")
	for i := 0; i < len(source); i++ {
		c := source[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || (c == '.' && i > 0) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "~%02x", c)
	}
	if b.Len() > maxSegment {
		sum := sha256.Sum256([]byte(source))
		return "source~h" + hex.EncodeToString(sum[:16])
	}
	return b.String()
}
