package parquetw

import "encoding/binary"

// appendHybrid appends vals in Parquet's RLE/bit-packed hybrid encoding, width bits a value:
// runs of 8 or more equal values become RLE runs and the rest bit-packed groups of 8. A
// bit-packed run in the middle must hold whole groups, so values are moved from the front of
// a long run into the pending group until it is whole; only the last group is padded, which
// readers allow because they know the count.
func appendHybrid(dst []byte, vals []uint32, width int) []byte {
	p := 0 // first value not yet written
	for i := 0; i < len(vals); {
		j := i + 1
		for j < len(vals) && vals[j] == vals[i] {
			j++
		}
		if j-i >= 8 {
			if k := (i - p) % 8; k != 0 {
				i += 8 - k
			}
			if j-i >= 8 {
				dst = appendPacked(dst, vals[p:i], width)
				dst = appendRun(dst, vals[i], j-i, width)
				p = j
			}
		}
		i = j
	}
	return appendPacked(dst, vals[p:], width)
}

func appendRun(dst []byte, v uint32, n, width int) []byte {
	dst = binary.AppendUvarint(dst, uint64(n)<<1)
	for b := 0; b < width; b += 8 {
		dst = append(dst, byte(v>>b))
	}
	return dst
}

// appendPacked writes vals as one bit-packed run, least significant bit first, padding the
// last group of 8 with zeros.
func appendPacked(dst []byte, vals []uint32, width int) []byte {
	if len(vals) == 0 {
		return dst
	}
	groups := (len(vals) + 7) / 8
	dst = binary.AppendUvarint(dst, uint64(groups)<<1|1)
	var acc uint64
	var bits int
	for i := range groups * 8 {
		var v uint32
		if i < len(vals) {
			v = vals[i]
		}
		acc |= uint64(v) << bits
		bits += width
		for bits >= 8 {
			dst = append(dst, byte(acc))
			acc >>= 8
			bits -= 8
		}
	}
	return dst // 8 values of width bits fill whole bytes, so nothing is left in acc
}
