package config

import (
	"errors"
	"io/fs"
	"os"
)

// Report is what `hyp config validate` says of a file (SPEC 7).
type Report struct {
	File     string    `json:"file"`
	Found    bool      `json:"found"` // false: <home>/hyp.yaml is missing, so the defaults apply
	Valid    bool      `json:"valid"`
	Problems []Problem `json:"problems"`
}

// CheckFile reads the file Load would read for path, expanding ${NAME} from the process
// environment, and reports every problem in it. A missing <home>/hyp.yaml is valid (it
// means the defaults); a path named explicitly that cannot be read is a problem.
func CheckFile(home, path string, ch Checks) Report {
	return checkFile(home, path, os.LookupEnv, ch)
}

func checkFile(home, path string, env Env, ch Checks) Report {
	name, data, err := read(home, path)
	r := Report{File: name, Found: data != nil, Problems: []Problem{}}
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		r.Problems = append(r.Problems, Problem{Message: "cannot read it: " + pe.Err.Error()})
	case err != nil:
		r.Problems = append(r.Problems, Problem{Message: err.Error()})
	case data != nil:
		if _, probs := check(home, data, env, ch); probs != nil {
			r.Problems = probs
		}
	}
	r.Valid = len(r.Problems) == 0
	return r
}

// Err is the report's problems as the error Load would give, nil for a valid file.
func (r Report) Err() error {
	if r.Valid {
		return nil
	}
	return &Problems{File: r.File, List: r.Problems}
}
