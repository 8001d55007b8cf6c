// Package redact owns how a secret inside a string is recognised and masked (SPEC 9.8): the
// password in a URI's userinfo, also where net/url cannot parse the URI (a '/', '#', '@' or
// bad '%' escape in the password); a password-like parameter (password=, sslpassword=, a
// token or secret) in a URI's query, a PostgreSQL key=value connection string or a logged
// key=value pair, quoted or not; and an Authorization header's or a bearer token's
// credentials. It also says, for a URI a config gives, whether its password can be located
// unambiguously (ParseURI), so a URI whose password two readers would cut differently is
// refused before anything prints or sends it.
//
// Everything that prints what may hold a secret (logs, errors, status, `config show`,
// metric labels) passes it through here once, at the point the string is made. Where a
// password's end cannot be known, masking errs towards too much: a swallowed neighbouring
// word makes a worse message, a password left in is a leak.
//
// It never logs and never imports hyp packages.
package redact

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Mask stands for a secret, as url.URL.Redacted and pgx write it.
const Mask = "xxxxx"

// String is s with every secret it recognises replaced by Mask. s may be a single value (a
// URI, a connection string) or free text holding several; what is not a secret is kept as
// written, byte for byte.
//
// Where a secret ends follows its syntax: a URI password at the last '@' of its URI, a
// quoted key=value at its closing quote (backslash escapes as libpq and Go write them), an
// unquoted one at whitespace, an Authorization header at the end of its line. A
// password-like query parameter runs to the next '&' or the end of its URI, and a URI ends
// only where a '"' closes the quote it was opened in, else at the end of s: a raw space or
// '#' in a password is then masked with it, and so is whatever text follows an unquoted URI.
// Redact a URI before it is formatted into a message, not the message, to keep its tail.
func String(s string) string {
	uris := findURIs(s)
	var spans []span
	for _, u := range uris {
		if sp, ok := u.password(s); ok {
			spans = append(spans, sp)
		}
	}
	spans = append(spans, paramSpans(s, uris)...)
	spans = append(spans, authSpans(s)...)
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	at := 0
	for i := 0; i < len(spans); {
		start, end := spans[i].start, spans[i].end
		// Overlapping or touching spans are one secret as far as the reader can tell.
		for i++; i < len(spans) && spans[i].start <= end; i++ {
			end = max(end, spans[i].end)
		}
		b.WriteString(s[at:start])
		b.WriteString(Mask)
		at = end
	}
	b.WriteString(s[at:])
	return b.String()
}

// Error is err with String applied to its message. Unwrap still reaches err, so errors.Is
// and errors.As work; what they find is unredacted.
func Error(err error) error {
	if err == nil {
		return nil
	}
	return &redacted{err}
}

type redacted struct{ err error }

func (e *redacted) Error() string { return String(e.err.Error()) }
func (e *redacted) Unwrap() error { return e.err }

// ParseURI parses s as url.Parse does, and fails where a password in s cannot be located
// unambiguously: where the userinfo password String masks holds a character RFC 3986 does
// not allow there ('/', '?', '#', '@', a space, a '%' not starting an escape), so net/url,
// pgx and libpq would each end it somewhere else or not parse it at all, or where a
// password-like query value holds one (a '#', a space, a bad escape). Its errors never
// quote any part of s.
func ParseURI(s string) (*url.URL, error) {
	uris := findURIs(s)
	if len(uris) > 0 && uris[0].start == 0 {
		if sp, ok := uris[0].password(s); ok && !validEscaped(s[sp.start:sp.end], userinfoChar) {
			return nil, errors.New("cannot tell where its password ends: percent-encode '/', '?', '#', '@', '%' and spaces in the password (as %2F, %3F, %23, %40, %25, %20), and an '@' after the host")
		}
	}
	for _, sp := range paramSpans(s, uris) {
		if sp.query && !validEscaped(s[sp.start:sp.end], queryChar) {
			return nil, errors.New("cannot tell where a password in its query ends: percent-encode '#', '%' and spaces in it (as %23, %25, %20)")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, parseError(err)
	}
	return u, nil
}

// parseError is url.Parse's reason without the piece of the input it quotes (an invalid
// port or escape may be part of a password the checks above did not recognise as one).
func parseError(err error) error {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error()
	}
	msg, _, _ = strings.Cut(msg, `"`)
	msg = strings.TrimSpace(strings.TrimPrefix(msg, "net/url: "))
	if msg == "" {
		return errors.New("cannot be parsed as a URI")
	}
	return fmt.Errorf("cannot be parsed as a URI: %s", msg)
}

// span is a secret's bytes in s, [start, end); query says it is a query parameter's value.
type span struct {
	start, end int
	query      bool
}

// uri is a "scheme://" in s: start is where its scheme starts, authority just after the
// "//", end where the URI ends at the latest.
type uri struct{ start, authority, end int }

func isSchemeChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// findURIs finds every "://" in s. Any one is taken for a URI, with or without a valid
// scheme before it: a missed URI can leak, a false one only costs a mask where its
// userinfo would be.
func findURIs(s string) []uri {
	var out []uri
	for from := 0; ; {
		i := strings.Index(s[from:], "://")
		if i < 0 {
			return out
		}
		i += from
		start := i
		for start > 0 && isSchemeChar(s[start-1]) {
			start--
		}
		end := len(s)
		if start > 0 && s[start-1] == '"' {
			end = closingQuote(s, i+3)
		}
		out = append(out, uri{start: start, authority: i + 3, end: end})
		from = i + 3
	}
}

// closingQuote is where a URI opened after a '"' ends: at an unescaped '"' that is followed
// by what follows a quoted value (the end, a space, or : , ; ) ] }), so that a quote inside
// an unescaped password does not end it; at the end of s when there is none.
func closingQuote(s string, from int) int {
	for i := from; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			if i+1 == len(s) || isSpace(s[i+1]) || strings.IndexByte(":,;)]}", s[i+1]) >= 0 {
				return i
			}
		}
	}
	return len(s)
}

// password is the userinfo password of u: after the first ':' of the userinfo and before
// the last '@' of the URI, which is where a password holding '@', '/' or '#' unescaped
// still ends. A URI opened in quotes whose quote closes before any '@' is searched to the
// end of s after all: the quote may be the password's.
func (u uri) password(s string) (span, bool) {
	k := u.authority
	for k < u.end && !isSpace(s[k]) && strings.IndexByte(":@/?#", s[k]) < 0 {
		k++
	}
	if k >= u.end || s[k] != ':' {
		return span{}, false
	}
	from := k + 1
	at := strings.LastIndexByte(s[from:u.end], '@')
	if at < 0 && u.end < len(s) {
		at = strings.LastIndexByte(s[from:], '@')
	}
	if at <= 0 { // none, or an empty password
		return span{}, false
	}
	return span{start: from, end: from + at}, true
}

// secretSuffixes end the names of parameters whose values are secrets: libpq's password and
// sslpassword, and the usual names of tokens and keys. sslkey and sslcert name files.
var secretSuffixes = []string{"password", "passwd", "passphrase", "pwd", "secret", "token", "apikey",
	"api_key", "secret_key", "private_key", "signature", "credential", "credentials"}

func isSecretKey(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	key = strings.ReplaceAll(strings.ToLower(key), "-", "_")
	for _, suf := range secretSuffixes {
		if strings.HasSuffix(key, suf) {
			return true
		}
	}
	return false
}

func isKeyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == '%'
}

// paramSpans finds the values of password-like key=value pairs. A key after '?' or '&' is
// a query parameter: its value runs to the next '&' or the end of its URI, escapes and all.
// Any other is a key=value pair as libpq and loggers write them: spaces allowed around the
// '=', the value single- or double-quoted with backslash escapes (an unclosed quote runs to
// the end), or else ending at unescaped whitespace.
func paramSpans(s string, uris []uri) []span {
	var out []span
	for from := 0; ; {
		i := strings.IndexByte(s[from:], '=')
		if i < 0 {
			return out
		}
		eq := from + i
		from = eq + 1
		keyEnd := eq
		for keyEnd > 0 && isSpace(s[keyEnd-1]) {
			keyEnd--
		}
		keyStart := keyEnd
		for keyStart > 0 && isKeyChar(s[keyStart-1]) {
			keyStart--
		}
		if keyStart == keyEnd || !isSecretKey(s[keyStart:keyEnd]) {
			continue
		}
		if keyStart > 0 && (s[keyStart-1] == '?' || s[keyStart-1] == '&') {
			if keyEnd != eq {
				continue // no space in a query's key=value
			}
			end := len(s)
			for _, u := range uris {
				if u.authority <= keyStart && keyStart < u.end {
					end = u.end
				}
			}
			if amp := strings.IndexByte(s[eq+1:end], '&'); amp >= 0 {
				end = eq + 1 + amp
			}
			if end > eq+1 {
				out = append(out, span{start: eq + 1, end: end, query: true})
			}
			continue
		}
		v := eq + 1
		for v < len(s) && isSpace(s[v]) {
			v++
		}
		// Read unquoted, the value ends at whitespace; read quoted, at its closing quote.
		// libpq quotes with ' only, a logger with ", and a message may have quoted it again:
		// the mask covers every reading.
		end := v
		for ; end < len(s) && !isSpace(s[end]); end++ {
			if s[end] == '\\' {
				end++
			}
		}
		end = min(end, len(s))
		switch {
		case v < len(s) && (s[v] == '\'' || s[v] == '"'):
			end = max(end, closingValueQuote(s, v))
		case v+1 < len(s) && s[v] == '\\' && (s[v+1] == '\'' || s[v+1] == '"'):
			// Where a quoted value in a string quoted again closes depends on how many
			// times it was escaped: it runs to where the outer quote closes.
			end = max(end, closingQuote(s, v))
		}
		if end > v {
			out = append(out, span{start: v, end: end})
			from = end
		}
	}
}

// closingValueQuote is the end of the value quoted at s[v]: just past an unescaped quote
// like it that is followed by what follows a value (the end, a space, or " , ; : ) ] } `),
// or the end of s. A quote followed by anything else is taken for the value's own, and so is
// one right after an escaped backslash while a later quote can close the value: inside a
// message that quoted the connection string again, libpq's \' is written \\'.
func closingValueQuote(s string, v int) int {
	for j := v + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case s[v]:
			if (j+1 == len(s) || isSpace(s[j+1]) || strings.IndexByte(`",;:)]}`+"`", s[j+1]) >= 0) && s[j-1] != '\\' {
				return j + 1
			}
		}
	}
	return len(s)
}

// authSpans finds credentials: the rest of the line after an Authorization header's name
// and its Bearer or Basic scheme (any other scheme is masked with them), and the token
// after the word Bearer.
func authSpans(s string) []span {
	var out []span
	lower := strings.ToLower(s)
	for from := 0; ; {
		i := strings.Index(lower[from:], "authorization")
		if i < 0 {
			break
		}
		v := from + i + len("authorization")
		from = v
		for v < len(s) && (s[v] == '"' || s[v] == '\'' || isSpace(s[v]) && s[v] != '\n' && s[v] != '\r') {
			v++
		}
		if v == len(s) || (s[v] != ':' && s[v] != '=') {
			continue
		}
		v++
		for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
			v++
		}
		// The scheme is kept when it is one the Bearer rule below or this one knows.
		for _, scheme := range []string{"bearer ", "basic "} {
			if strings.HasPrefix(lower[v:], scheme) {
				v += len(scheme)
			}
		}
		end := v
		for end < len(s) && s[end] != '\n' && s[end] != '\r' {
			end++
		}
		if end > v {
			out = append(out, span{start: v, end: end})
		}
		from = end
	}
	for from := 0; ; {
		i := strings.Index(lower[from:], "bearer")
		if i < 0 {
			return out
		}
		i += from
		v := i + len("bearer")
		from = v
		if i > 0 && isWordChar(s[i-1]) || v == len(s) || !isSpace(s[v]) {
			continue
		}
		for v < len(s) && isSpace(s[v]) && s[v] != '\n' && s[v] != '\r' {
			v++
		}
		end := v
		for end < len(s) && !isSpace(s[end]) {
			end++
		}
		if end > v {
			out = append(out, span{start: v, end: end})
		}
	}
}

func isWordChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// userinfoChar is what RFC 3986 allows unescaped in a userinfo: unreserved, sub-delims, ':'.
func userinfoChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("-._~!$&'()*+,;=:", c) >= 0
}

// queryChar is what RFC 3986 allows unescaped in a query value ('&' ends one).
func queryChar(c byte) bool { return userinfoChar(c) && c != '&' || c == '@' || c == '/' || c == '?' }

// validEscaped says s holds only ok characters and complete %XX escapes.
func validEscaped(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		case !ok(s[i]):
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
