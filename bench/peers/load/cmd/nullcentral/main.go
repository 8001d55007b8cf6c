// nullcentral: a stand-in for `hyp server` that costs next to nothing, so that a forward sink's
// own speed and CPU can be measured apart from the server's. It reads each POST
// /v1/ingest/{dataset} body to the end (so the sender's whole request is on the wire) and
// answers 200 {"accepted":N,"duplicates":0} with N taken from X-Hyp-Seq-Range. It neither
// decompresses, parses nor stores anything; GET /healthz answers 200.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4319", "address to listen on")
	flag.Parse()
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {})
	http.HandleFunc("/v1/ingest/", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		first, last, ok := strings.Cut(r.Header.Get("X-Hyp-Seq-Range"), "-")
		f, err1 := strconv.ParseInt(first, 10, 64)
		l, err2 := strconv.ParseInt(last, 10, 64)
		if !ok || err1 != nil || err2 != nil || l < f {
			http.Error(w, `{"error":"bad_seq_range"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"accepted":%d,"duplicates":0}`, l-f+1)
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
