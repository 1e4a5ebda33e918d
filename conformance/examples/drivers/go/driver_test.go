package driver_test

import (
	"os"
	"testing"

	"kpurgatory/driver"
	"kpurgatory/driver/stdio"
)

// TestVectors runs the tree against the adapter in KPURGATORY_ADAPTER, judged at KPURGATORY_LEVEL (default exact).
// Bindings of other implementations live in their own modules (conformance/examples/go-*), so that this one needs
// nothing but the standard library.
func TestVectors(t *testing.T) {
	if b := os.Getenv("KPURGATORY_BINDING"); b != "" && b != "stdio" {
		t.Fatalf("KPURGATORY_BINDING=%q: this module has the stdio binding only; run a registry binding's tests in its own folder", b)
	}
	command := os.Getenv("KPURGATORY_ADAPTER")
	if command == "" {
		t.Fatal("KPURGATORY_ADAPTER is not set: an adapter command, e.g. " +
			"'python -m kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.builtin:factory'")
	}
	level := os.Getenv("KPURGATORY_LEVEL")
	if level == "" {
		level = "exact"
	}
	b, err := stdio.Start(command, level)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Close(b.System)
	driver.Run(t, b)
}
