package otlp

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

func TestAppendFloat(t *testing.T) {
	cases := []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{2, "2.0"},
		{-3, "-3.0"},
		{0.25, "0.25"},
		{1e20, "100000000000000000000.0"},
		{1e21, "1e+21"},
		{1.5e-7, "1.5e-07"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.SmallestNonzeroFloat64, "5e-324"},
		{math.NaN(), `"NaN"`},
		{math.Inf(1), `"Infinity"`},
		{math.Inf(-1), `"-Infinity"`},
	}
	for _, tc := range cases {
		got := string(appendFloat(nil, tc.in))
		if got != tc.want {
			t.Errorf("appendFloat(%v) = %s, want %s", tc.in, got, tc.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("appendFloat(%v) = %s is not valid JSON", tc.in, got)
		}
	}
}

func TestTimeField(t *testing.T) {
	cases := []struct {
		in   pcommon.Timestamp
		want string
	}{
		{0, `{}`},
		{1, `{"t":"1970-01-01T00:00:00.000000001Z"}`},
		{ts0, `{"t":"2018-12-13T14:51:00.3Z"}`},
		// Past int64 nanoseconds (year 2262) time must keep moving forward.
		{math.MaxUint64, `{"t":"2554-07-21T23:34:33.709551615Z"}`},
	}
	for _, tc := range cases {
		var w jsonWriter
		w.beginObject()
		w.timeField("t", uint64(tc.in))
		w.endObject()
		if string(w.b) != tc.want {
			t.Errorf("timeField(%d) = %s, want %s", uint64(tc.in), w.b, tc.want)
		}
	}
}

func TestCheckJSONDepth(t *testing.T) {
	deep := strings.Repeat("[", maxJSONDepth+1)
	cases := []struct {
		in string
		ok bool
	}{
		{strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth), true},
		{deep, false},
		// Brackets inside strings, including after escaped quotes, do not nest.
		{`{"k":"` + deep + `"}`, true},
		{`{"k":"\"` + deep + `"}`, true},
		{`{"k":"\\"` + deep, false},
		// Siblings do not add up.
		{strings.Repeat("[]", 2*maxJSONDepth), true},
	}
	for i, tc := range cases {
		if err := checkJSONDepth([]byte(tc.in)); (err == nil) != tc.ok {
			t.Errorf("case %d: err = %v, want ok = %v", i, err, tc.ok)
		}
	}
}

func TestAppendTimeIsRFC3339Nano(t *testing.T) {
	var w jsonWriter
	cases := []uint64{1, 999, 1e9, 1e9 + 1, 1e9 + 10, 1e9 + 123456789, 1e9 + 100000000, 1764600000e9, 1764600000e9 + 5, 1764600001e9 + 5, 1<<63 - 1, 1 << 63, 1<<64 - 1}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		cases = append(cases, r.Uint64(), 1764600000e9+r.Uint64N(3e9))
	}
	for _, ts := range cases {
		want := time.Unix(int64(ts/1e9), int64(ts%1e9)).UTC().Format(time.RFC3339Nano)
		if got := string(w.appendTime(nil, ts)); got != want {
			t.Errorf("%d: %s, want %s", ts, got, want)
		}
	}
}
