package python

import "testing"

// TestCandidate: the names CPython's interpreter is mapped under, and
// names that are not it.
func TestCandidate(t *testing.T) {
	for name, want := range map[string]bool{
		"/usr/bin/python3.11": true,
		"/root/.pyenv/versions/3.6.15/lib/libpython3.6m.so.1.0": true,
		"/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0":        true,
		"/usr/local/lib/libpython3.13.so":                       true,
		"/opt/conda/bin/python":                                 true,
		"/usr/bin/python3":                                      true,
		"/usr/bin/python3.12-config":                            false,
		"/usr/lib/python3.11/lib-dynload/_json.so":              false,
		"/usr/bin/perl":                                         false,
		"/usr/lib/libpythonize.so":                              true, // read, and found not to be CPython
	} {
		if got := Candidate(name); got != want {
			t.Errorf("Candidate(%q) = %v, want %v", name, got, want)
		}
	}
}
