package vectors

import (
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// An in-process binding runs in a child process of the test, so that a call that overflows its goroutine's stack
// (a fatal error no recover catches) or never returns ends that child, not the run: the test binary runs itself
// again for the same test with childVariable set, and the child serves the binding on its standard input and output
// as a stdio adapter does (Serve). The parent drives it through the same client as any adapter (adapter.go): a call
// with no answer within CallTimeout is hung, a child that dies crashed (with the first lines of its stderr); either
// way the child is killed and a new one serves the next case.
const childVariable = "KPURGATORY_VECTORS_CHILD"

// isChild says whether this process is the child serving the binding of the test t.
func isChild(t *testing.T) bool {
	return os.Getenv(childVariable) == t.Name()
}

// serveChild serves the binding until the parent closes its input. Whatever else the test prints goes to stderr
// meanwhile, so that stdout carries only the protocol.
func serveChild(t *testing.T, b Binding) {
	// Go's default of 1 GB takes a gigabyte of memory and seconds to overflow
	debug.SetMaxStack(64 << 20)
	protocol := os.Stdout
	os.Stdout = os.Stderr
	defer func() { os.Stdout = protocol }()
	if err := Serve(b, os.Stdin, protocol); err != nil {
		t.Fatal(err)
	}
}

// child is the binding's System served from a child process running the test t only.
func child(t *testing.T, b Binding) (System, error) {
	executable, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var pattern []string
	for _, name := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(name)+"$")
	}
	served, err := StartAdapter(func() *exec.Cmd {
		cmd := exec.Command(executable, "-test.run="+strings.Join(pattern, "/"))
		cmd.Env = append(os.Environ(), childVariable+"="+t.Name())
		return cmd
	}, b.Level)
	return served.System, err
}
