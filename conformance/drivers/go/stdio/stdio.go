// Package stdio binds the driver to an adapter that speaks specs/protocol.md on standard input and output: the
// project's own implementation, or yours in any language; and serves a Go binding as such an adapter.
package stdio

import (
	"errors"
	"io"
	"os/exec"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
)

// Start spawns the adapter command (run by sh) and says hello; the binding takes its name, profiles, read-outs,
// unsupported commands and declarations from the hello, and judges at the given level. A call the adapter does not
// answer within vectors.CallTimeout, or its death, fails that call's case; the adapter is then killed and started
// again for the next case.
func Start(command, level string) (vectors.Binding, error) {
	if command == "" {
		return vectors.Binding{}, errors.New("no adapter command (KPURGATORY_ADAPTER is not set?), e.g. " +
			"'python -m kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.builtin:factory'")
	}
	// exec: the adapter is sh's own process, so that killing it kills the adapter, not only the shell
	return vectors.StartAdapter(func() *exec.Cmd { return exec.Command("sh", "-c", "exec "+command) }, level)
}

// Serve serves a binding as an adapter on in and out (vectors.Serve), so that `kpurgatory check --adapter CMD` can
// drive a Go implementation with generated runs and shrink what it finds.
func Serve(b vectors.Binding, in io.Reader, out io.Writer) error {
	return vectors.Serve(b, in, out)
}
