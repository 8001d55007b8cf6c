package lake

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestCatalogErrorsShowNoPassword: an sql catalog URI whose password cannot be located is
// refused before pgx sees it, and one pgx cannot reach fails naming the catalog with its
// password masked.
func TestCatalogErrorsShowNoPassword(t *testing.T) {
	for _, tc := range []struct{ uri, want string }{
		{"postgres://hyp:S3/CRET@127.0.0.1:1/cat", "cannot tell where its password ends"},
		{"postgres://hyp:S3#CRET@127.0.0.1:1/cat", "cannot tell where its password ends"},
		{"postgres://hyp:S3CRET@127.0.0.1:1/cat?connect_timeout=5", "catalog postgres://hyp:xxxxx@127.0.0.1:1/cat"},
		{"postgres://hyp@127.0.0.1:1/cat?connect_timeout=5&sslpassword=S3CRET", "sslpassword=xxxxx"},
	} {
		_, err := Open(context.Background(), Options{Catalog: "sql", URI: tc.uri, Warehouse: filepath.Join(t.TempDir(), "w"), Namespace: "hyp", PartitionBy: "day", Gateway: "g"})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "S3") {
			t.Errorf("Open(%q): %v, want an error saying %q without the password", tc.uri, err, tc.want)
		}
	}
}
