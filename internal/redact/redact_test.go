package redact

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// URIs that parse.
		{"postgres://user:PASSWORD@host/db", "postgres://user:xxxxx@host/db"},
		{"postgresql://u:p%40ss@h:5432/d?sslmode=x", "postgresql://u:xxxxx@h:5432/d?sslmode=x"},
		{"http://a:b@central:1", "http://a:xxxxx@central:1"},
		{"http://:b@central", "http://:xxxxx@central"},
		{"postgres://user@host/db", "postgres://user@host/db"},
		{"postgres://user:@host/db", "postgres://user:@host/db"},
		{"http://host:8080/path", "http://host:8080/path"},
		{"postgres://host/db?sslmode=disable&b=1", "postgres://host/db?sslmode=disable&b=1"},
		{"sqlite:///var/lib/hyp/cat.db", "sqlite:///var/lib/hyp/cat.db"},
		{"s3://bucket/prefix", "s3://bucket/prefix"},
		// URIs that do not: the password runs to the last '@'.
		{"postgres://hyp:S3/CRET@db:5432/hyp", "postgres://hyp:xxxxx@db:5432/hyp"},
		{"postgres://hyp:S3%ZZCRET@db/hyp", "postgres://hyp:xxxxx@db/hyp"},
		{"postgres://hyp:S3#CRET@db/hyp", "postgres://hyp:xxxxx@db/hyp"},
		{"postgres://hyp:S3@CR:ET@db/hyp", "postgres://hyp:xxxxx@db/hyp"},
		{"postgres://hyp:S3 C?RET@db/hyp", "postgres://hyp:xxxxx@db/hyp"},
		// Query parameters: to the next '&' or the end, escapes and all.
		{"postgres://host/db?user=u&password=p&x=1", "postgres://host/db?user=u&password=xxxxx&x=1"},
		{"postgres://host/db?sslpassword=p#q w&sslmode=require", "postgres://host/db?sslpassword=xxxxx&sslmode=require"},
		{"postgres://host/db?PassWord=p", "postgres://host/db?PassWord=xxxxx"},
		{"postgres://host/db?pass%77ord=p", "postgres://host/db?pass%77ord=xxxxx"},
		{"https://b.s3/k?X-Amz-Security-Token=T&X-Amz-Signature=S&X-Amz-Date=D", "https://b.s3/k?X-Amz-Security-Token=xxxxx&X-Amz-Signature=xxxxx&X-Amz-Date=D"},
		{"postgres://host/db?sslkey=/etc/k.pem", "postgres://host/db?sslkey=/etc/k.pem"},
		// key=value connection strings, libpq's quoting.
		{"host=x password=S3CRET dbname=hyp", "host=x password=xxxxx dbname=hyp"},
		{"host=x password='a b' dbname=hyp", "host=x password=xxxxx dbname=hyp"},
		{`host=x password='a\'b c' dbname=hyp`, "host=x password=xxxxx dbname=hyp"},
		{`host=x password=a\ b dbname=hyp`, "host=x password=xxxxx dbname=hyp"},
		{"host=x password = S3CRET", "host=x password = xxxxx"},
		{"host=x sslpassword=S3CRET sslkey=/k", "host=x sslpassword=xxxxx sslkey=/k"},
		{"host=x password='unclosed dbname=hyp", "host=x password=xxxxx"},
		{"password=", "password="},
		// Logged pairs.
		{`msg=hi token="a \"b\" c" n=1`, "msg=hi token=xxxxx n=1"},
		{`api_key=K user=u`, "api_key=xxxxx user=u"},
		{"token_file=/etc/hyp/token", "token_file=/etc/hyp/token"},
		// Headers and tokens.
		{"Authorization: Bearer abc.def\r\nHost: h", "Authorization: Bearer xxxxx\r\nHost: h"},
		{"authorization: basic dTpw\nx: y", "authorization: basic xxxxx\nx: y"},
		{"Authorization: Token a b c", "Authorization: xxxxx"},
		{"sent Bearer abc123 to it", "sent Bearer xxxxx to it"},
		{"a bearerless line", "a bearerless line"},
		// In messages: a URI in quotes ends at its closing quote.
		{`sinks.c.url: "http://u:p/w@h": cannot tell`, `sinks.c.url: "http://u:xxxxx@h": cannot tell`},
		{`"http://u:p@a" is listed twice (also "http://u:q@b")`, `"http://u:xxxxx@a" is listed twice (also "http://u:xxxxx@b")`},
		{`"postgres://h/db?sslpassword=a b": scheme`, `"postgres://h/db?sslpassword=xxxxx": scheme`},
		{"cluster: postgres postgres://hyp:S3/CRET@db/hyp: failed to connect", "cluster: postgres postgres://hyp:xxxxx@db/hyp: failed to connect"},
		{`"postgres://u:a"b@h/db": bad`, `"postgres://u:xxxxx@h/db": bad`},
		// Nothing to mask.
		{"127.0.0.1:18521", "127.0.0.1:18521"},
		{"@every 1m", "@every 1m"},
		{"not a uri: user:pass@host", "not a uri: user:pass@host"},
		{"", ""},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

func TestError(t *testing.T) {
	inner := errors.New("cannot parse postgres://hyp:S3/CRET@db/hyp")
	err := Error(fmt.Errorf("open: %w", inner))
	if got, want := err.Error(), "open: cannot parse postgres://hyp:xxxxx@db/hyp"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, inner) {
		t.Error("errors.Is does not reach the wrapped error")
	}
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

func TestParseURI(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		pass string // the password url.Parse then sees
	}{
		{"postgres://hyp:S3CRET@db:5432/hyp", true, "S3CRET"},
		{"postgres://hyp:S3%2FCR%23ET%40x@db/hyp", true, "S3/CR#ET@x"},
		{"postgres://hyp:a:b@db/hyp", true, "a:b"},
		{"http://central:8080", true, ""},
		{"postgres://db/hyp?sslpassword=a%23b&sslmode=require", true, ""},
		{"postgres://hyp:S3/CRET@db/hyp", false, ""},
		{"postgres://hyp:12/CRET@db/hyp", false, ""}, // url.Parse takes 12 for a port
		{"postgres://hyp:S3%ZZCRET@db/hyp", false, ""},
		{"postgres://hyp:S3#CRET@db/hyp", false, ""},
		{"postgres://hyp:1#2@db/hyp", false, ""}, // url.Parse takes 2@db/hyp for a fragment
		{"postgres://hyp:S3@CRET@db/hyp", false, ""},
		{"postgres://hyp:S3 CRET@db/hyp", false, ""},
		{"http://host:8080/a@b", false, ""},
		{"postgres://db/hyp?sslpassword=a#b", false, ""},
		{"postgres://db/hyp?password=a b", false, ""},
		{"postgres://db/hyp?password=a%ZZ", false, ""},
		{"http://[::1", false, ""},
	} {
		u, err := ParseURI(c.in)
		if (err == nil) != c.ok {
			t.Errorf("ParseURI(%q): error %v, want ok %v", c.in, err, c.ok)
			continue
		}
		if err != nil {
			if masked := String(c.in); strings.Contains(err.Error(), strings.TrimPrefix(c.in, "postgres://")) || leaks(err.Error(), c.in, masked) {
				t.Errorf("ParseURI(%q) error %q quotes the input", c.in, err)
			}
			continue
		}
		if p, _ := u.User.Password(); p != c.pass {
			t.Errorf("ParseURI(%q) password %q, want %q", c.in, p, c.pass)
		}
	}
}

// leaks says msg holds a piece of in that String masks.
func leaks(msg, in, masked string) bool {
	for i := 0; i+4 <= len(in); i++ {
		piece := in[i : i+4]
		if strings.Contains(msg, piece) && !strings.Contains(masked, piece) {
			return true
		}
	}
	return false
}

// FuzzRedact puts a generated password into every syntax that carries one, in the form that
// syntax writes it, alone and inside a message; no letter of it may come out. Passwords are
// made of upper-case letters and the characters that break URI and DSN parsing, and the
// text around them has no upper-case letter, so any upper-case letter in the output is a
// piece of the password.
func FuzzRedact(f *testing.F) {
	for _, seed := range []string{"S3CRET", "S3/CRET", "S3%ZZCRET", "S3#CRET", "S3@CR:ET", "A B'C", `A\'B`, "A://B:C@D",
		"A password=B", "A&B=C", `A"B`, "A\tB", "%41%42", "A?B#C/D@E", "A@", "@A", ":A", "A:"} {
		f.Add([]byte(seed))
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/%#@:' \"\\&?=+;,!$*()[]{}<>|~`^\t"
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || len(raw) > 64 {
			return
		}
		b := make([]byte, len(raw))
		for i, c := range raw {
			if strings.IndexByte(alphabet, c) < 0 {
				c = alphabet[int(c)%len(alphabet)]
			}
			b[i] = c
		}
		pw := string(b)
		if !strings.ContainsFunc(pw, unicode.IsUpper) {
			pw = "Q" + pw
		}
		noAmp := strings.ReplaceAll(pw, "&", "Q")
		token := strings.Map(func(r rune) rune {
			if unicode.IsSpace(r) {
				return 'Q'
			}
			return r
		}, pw)
		values := map[string]string{
			"userinfo raw":     "postgres://hyp:" + pw + "@db.example:5432/hyp?sslmode=require",
			"userinfo no user": "http://:" + pw + "@central:8080",
			"userinfo encoded": (&url.URL{Scheme: "postgres", User: url.UserPassword("hyp", pw), Host: "db:5432", Path: "/hyp"}).String(),
			"query raw":        "postgres://hyp@db/hyp?sslmode=require&sslpassword=" + noAmp + "&application_name=x",
			"query first":      "postgres://db/hyp?password=" + noAmp,
			"query encoded":    "postgres://db/hyp?" + url.Values{"sslpassword": {pw}, "user": {"hyp"}}.Encode(),
			"dsn":              "host=db user=hyp password=" + dsnQuote(pw) + " dbname=hyp",
			"dsn spaced":       "host=db password = " + dsnQuote(pw),
			"dsn quoted":       "host=db password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "' sslmode=disable",
			"logged pair":      "level=warn token=" + strconv.Quote(pw) + " n=1",
			"header":           "authorization: bearer " + token + "\r\nhost: central",
			"header other":     "authorization: " + token + "\nhost: central",
			"bearer":           "sent bearer " + token + " to central",
		}
		for syntax, v := range values {
			for _, in := range []string{v, "cluster: postgres " + v + ": failed to connect (dial tcp 127.0.0.1:1: refused)",
				strconv.Quote(v) + ": cannot tell where its password ends", "url=" + strconv.Quote(v) + " err=refused"} {
				if syntax == "header" || syntax == "header other" {
					if in != v {
						continue // a header is a line of its own
					}
				}
				out := String(in)
				if strings.ContainsFunc(out, unicode.IsUpper) {
					t.Fatalf("%s: password %q leaks:\n in: %q\nout: %q", syntax, pw, in, out)
				}
			}
		}
		for _, syntax := range []string{"userinfo raw", "userinfo no user", "userinfo encoded", "query raw", "query first", "query encoded"} {
			// The message's own upper case: the word URI and the escapes it suggests.
			if _, err := ParseURI(values[syntax]); err != nil && strings.ContainsFunc(hints.ReplaceAllString(err.Error(), ""), unicode.IsUpper) {
				t.Fatalf("%s: ParseURI error quotes password %q: %v", syntax, pw, err)
			}
		}
	})
}

var hints = regexp.MustCompile(`URI|URL|%[0-9A-F]{2}`)

// dsnQuote writes v as a libpq key=value connection string value: quoted when it has to be.
func dsnQuote(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`+"\t\n\r\v\f") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
