// Package icebergpath owns the rules a local path must meet before hyp hands it to
// iceberg-go as a warehouse, so that the config's validation (`hyp config check`, every
// start) and the lake that opens the catalog refuse the same paths with the same words.
//
// It is a leaf: it imports nothing of hyp's, never touches the file system and never
// opens a catalog.
package icebergpath

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// CheckHadoopWarehouse refuses a local warehouse the hadoop catalog would misplace files of.
// iceberg-go (v0.7) keeps a hadoop table's location as a bare path, which its writers parse
// as a URL and join onto as one: every character a URL path escapes comes out escaped, in a
// path no scheme marks as escaped, so data and manifest files land under another directory
// than the table's metadata; and a '%' not followed by two hex digits fails that parse, so
// the catalog cannot open at all. An sql catalog's locations are file:// URIs and take any
// path.
func CheckHadoopWarehouse(path string) error {
	escaped := (&url.URL{Path: path}).EscapedPath()
	if escaped == path {
		return nil
	}
	var bad []string
	for _, r := range path {
		if c := string(r); (&url.URL{Path: c}).EscapedPath() != c && !slices.Contains(bad, strconv.Quote(c)) {
			bad = append(bad, strconv.Quote(c))
		}
	}
	return fmt.Errorf("%q: the hadoop catalog cannot use a path with %s in it (iceberg-go would write its data files under %q); "+
		"use a path of ASCII letters, digits and -_.~/ or catalog {type: sql, uri: \"sqlite:///path/catalog.db\"}", path, strings.Join(bad, ", "), escaped)
}
