package buildid

import "testing"

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"0123456789abcdef0123456789abcdef01234567": true, // SHA-1, the usual
		"abcd":                         true,
		"ab":                           false, // too short for NN/REST.debug
		"abc":                          false, // odd
		"ABCD":                         false,
		"../etc":                       false,
		"ab/cd":                        false,
		"":                             false,
		string(make([]byte, MaxLen+2)): false,
	} {
		if got := Valid(id); got != want {
			t.Errorf("Valid(%q) = %v, want %v", id, got, want)
		}
	}
	long := ""
	for len(long) < MaxLen {
		long += "ab"
	}
	if !Valid(long) || Valid(long+"ab") {
		t.Errorf("bounds: Valid(%d chars) = %v, Valid(%d chars) = %v", len(long), Valid(long), len(long)+2, Valid(long+"ab"))
	}
}
