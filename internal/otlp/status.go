package otlp

import (
	"encoding/binary"
	"strings"
)

// AppendStatus appends a google.rpc.Status message (1: code, 2: message; no details), the
// body OTLP/HTTP gives a refused protobuf request. Invalid UTF-8 in message is replaced,
// since a protobuf string must be valid UTF-8.
func AppendStatus(dst []byte, code int32, message string) []byte {
	if code != 0 {
		dst = append(dst, 1<<3|0)
		dst = binary.AppendUvarint(dst, uint64(int64(code)))
	}
	if message != "" {
		message = strings.ToValidUTF8(message, "\uFFFD")
		dst = append(dst, 2<<3|2)
		dst = binary.AppendUvarint(dst, uint64(len(message)))
		dst = append(dst, message...)
	}
	return dst
}
