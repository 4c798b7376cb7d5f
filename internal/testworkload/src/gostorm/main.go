// gostorm lives ARGV[1] milliseconds and exits: the exec storm's Go process,
// whose .gopclntab is what a negative cache saves parsing. It links net/http
// so its tables are the size of a real tool's (kubectl, helm), not a toy's.
package main

import (
	"net/http"
	"os"
	"strconv"
	"time"
)

// client keeps net/http linked in.
var client = http.DefaultClient

func main() {
	ms := 0
	if len(os.Args) > 1 {
		ms, _ = strconv.Atoi(os.Args[1])
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
	if len(os.Args) > 2 {
		_, _ = client.Get(os.Args[2])
	}
}
