package parquetw

import (
	"sync"

	"github.com/klauspost/compress/zstd"
)

// codecZstd is Parquet's id of the codec every page is compressed with.
const codecZstd = 6

// zstdEncoder is shared by every file: EncodeAll is safe for concurrent use, and one
// encoder keeps its history buffers across pages instead of allocating them per page.
// Pages are at most about a MiB, so a window past that only costs memory; the frame
// checksum is left out because Parquet readers do not check it (a page can carry its own
// CRC).
var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false),
		zstd.WithZeroFrames(true),
		zstd.WithWindowSize(1<<20),
		zstd.WithLowerEncoderMem(true),
	)
	if err != nil {
		panic(err) // the options are constants
	}
	return enc
})

func compress(src, dst []byte) []byte {
	return zstdEncoder().EncodeAll(src, dst)
}
