package server

import (
	"encoding/json"
	"net/http"

	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/ledger"
)

// LocalStatus is a single-node server's `hyp server status`, in cluster mode's shape so that
// one reader serves both: no replicas and no committer, nothing staged (rows are stored in
// the server's cache when acknowledged), and per gateway its incarnations with the rows
// each stored, the gateway's last sighting and rows being theirs summed.
func LocalStatus(led *ledger.Ledger) (cluster.Report, error) {
	incs, err := led.Incarnations()
	if err != nil {
		return cluster.Report{}, err
	}
	r := cluster.Report{Replicas: []cluster.Replica{}, Gateways: []cluster.Gateway{}}
	for _, inc := range incs { // sorted by gateway
		n := len(r.Gateways)
		if n == 0 || r.Gateways[n-1].Gateway != inc.Gateway {
			r.Gateways = append(r.Gateways, cluster.Gateway{Gateway: inc.Gateway})
			n++
		}
		g := &r.Gateways[n-1]
		if inc.LastSeen.After(g.LastSeen) {
			g.LastSeen = inc.LastSeen
		}
		g.RowsStored += inc.Rows
		g.Incarnations = append(g.Incarnations, inc)
	}
	return r, nil
}

// StatusHandler serves LocalStatus at GET /v1/server/status, for the control socket.
func StatusHandler(led *ledger.Ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/server/status", func(w http.ResponseWriter, _ *http.Request) {
		r, err := LocalStatus(led)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "internal", "message": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(r)
	})
	return mux
}
