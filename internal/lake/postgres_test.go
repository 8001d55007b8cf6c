package lake

import (
	"path/filepath"
	"testing"

	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

func TestPostgresCatalog(t *testing.T) {
	uri := pgtest.Start(t).URI()
	o := Options{Catalog: "sql", URI: uri, Warehouse: filepath.Join(t.TempDir(), "warehouse"), Namespace: "hyp", PartitionBy: "day", Gateway: "gw-a"}
	a, b := openAs(t, o, "gw-a"), openAs(t, o, "gw-b")
	// Each unit is committed twice: the repeat, a retry after a crash, must add nothing.
	commitConcurrently(t, a, b, 6, 4, true)
}
