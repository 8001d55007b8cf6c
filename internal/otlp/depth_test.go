package otlp

import "fmt"

// checkJSONDepth reports bodies nested deeper than maxJSONDepth, which the
// decoder refuses and pdata's recursive decoder must not be given. It only
// tracks brackets outside strings.
func checkJSONDepth(body []byte) error {
	depth := 0
	inString, escaped := false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > maxJSONDepth {
				return fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}
