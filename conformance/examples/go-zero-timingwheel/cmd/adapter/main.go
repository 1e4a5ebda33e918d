// Command adapter serves go-zero's TimingWheel binding on stdin/stdout, for `kpurgatory check --adapter`.
package main

import (
	"log"
	"os"

	gozero "kpurgatory/examples/gozero"

	"github.com/kpurgatory/kpurgatory/conformance/drivers/go/stdio"
)

func main() {
	if err := stdio.Serve(gozero.Binding(), os.Stdin, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
