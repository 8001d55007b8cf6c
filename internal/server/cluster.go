package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/httpbody"
)

// Cluster is cluster mode's shared store (SPEC 5); *cluster.Cluster implements it. Store
// must be durable on return, report bad rows as *cache.InputError, and not retain ch.Rows
// once it returns (they alias a reused request buffer); ch.Records it keeps it Retains. It may hold the request until the
// chunks of a short window are stored together, so answers wait for that group.
type Cluster interface {
	Store(ctx context.Context, ch cluster.Chunk) (cluster.Stored, error)
}

// NewClusterHandler is NewHandler for a replica in cluster mode: chunks are kept in the
// cluster's shared ledger and warehouse instead of a local cache.
func NewClusterHandler(c Cluster, o Options) (http.Handler, error) {
	if c == nil {
		return nil, errors.New("server: nil cluster")
	}
	return newHandler(clusterKeeper{c: c}, userJSON, o)
}

type clusterKeeper struct{ c Cluster }

// keep hands the cluster the chunk's records (an Arrow body in the columnar form) or each
// row's user fields as a JSON object of its own (parseRows wrote them so); the cluster
// holds the per-key lock and the ledger.
func (k clusterKeeper) keep(ctx context.Context, dataset string, fw forward, ch *chunk) (kept, error) {
	// parseRows refused any row without its ingest time: the replica never stamps its own.
	cc := cluster.Chunk{Gateway: fw.gateway, Incarnation: fw.incarnation, Dataset: dataset, Source: fw.source,
		Seqs: ch.seqs, IngestedAt: ch.ats}
	if len(ch.recs) > 0 {
		cc.Records = ch.recs
	} else {
		cc.Rows = ch.all()
	}
	st, err := k.c.Store(ctx, cc)
	var ie *cache.InputError
	if errors.As(err, &ie) {
		return kept{}, &httpbody.Error{Status: http.StatusBadRequest, Kind: ie.Kind, Line: ie.Line, Msg: ie.Msg}
	}
	return kept{accepted: st.Accepted, seen: st.Seen}, err
}
