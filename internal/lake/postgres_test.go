package lake

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

func TestPostgresCatalog(t *testing.T) {
	ctx := context.Background()
	uri := pgtest.Start(t).URI()
	o := Options{Catalog: "sql", URI: uri, Warehouse: filepath.Join(t.TempDir(), "warehouse"), Namespace: "hyp", PartitionBy: "day", Gateway: "gw-a"}
	a, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	o.Gateway = "gw-b"
	b, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Each unit is committed twice: the repeat, a retry after a crash, must add nothing.
	commitConcurrently(t, a, b, 6, 4, true)
}
