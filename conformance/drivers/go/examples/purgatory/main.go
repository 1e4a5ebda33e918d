// Command purgatory serves a small purgatory in Go, shaped as Kafka's (4.x) and built on the driver's scheduler
// locks (vectors.NewMutex), as an adapter: `kpurgatory check --adapter 'go run ./examples/purgatory' --threads 4
// --scheduler random` chooses every switch between its goroutines. `-plant check-rewrites-list` plants a race: a
// check writes back the list it walked, dropping what was watched on the key meanwhile.
package main

import (
	"flag"
	"fmt"
	"os"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
	"github.com/kpurgatory/kpurgatory/conformance/drivers/go/stdio"
)

func main() {
	plant := flag.String("plant", "", "a bug to plant: check-rewrites-list")
	flag.Parse()
	if *plant != "" && *plant != "check-rewrites-list" {
		fmt.Fprintf(os.Stderr, "purgatory: unknown -plant %q (check-rewrites-list is the one)\n", *plant)
		os.Exit(2)
	}
	name := "kpurgatory Go example purgatory"
	if *plant != "" {
		name += " (planted: " + *plant + ")"
	}
	binding := vectors.Binding{Name: name, Level: "contract", Profiles: []string{"purgatory"}, Concurrent: true,
		System: vectors.PurgatorySystem(&purgatory{plant: *plant})}
	if err := stdio.Serve(binding, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "purgatory:", err)
		os.Exit(3)
	}
}
