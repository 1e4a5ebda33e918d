// Package stdio binds the driver to an adapter that speaks specs/protocol.md on standard input and output: the
// project's own implementation, or yours in any language.
package stdio

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
)

// Timeout bounds the wait for each response, as the harness's --timeout does.
var Timeout = 10 * time.Second

// Adapter is a running adapter process.
type Adapter struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte
	stderr *tail
	seq    int64
}

// Start spawns the adapter command (run by sh) and says hello; the binding takes its name, profiles, read-outs,
// unsupported commands and declarations from the hello, and judges at the given level.
func Start(command, level string) (vectors.Binding, error) {
	if command == "" {
		return vectors.Binding{}, errors.New("no adapter command (KPURGATORY_ADAPTER is not set?), e.g. " +
			"'python -m kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.builtin:factory'")
	}
	a := &Adapter{cmd: exec.Command("sh", "-c", command), lines: make(chan []byte), stderr: &tail{}}
	a.cmd.Stderr = a.stderr
	stdout, err := a.cmd.StdoutPipe()
	if err == nil {
		a.stdin, err = a.cmd.StdinPipe()
	}
	if err == nil {
		err = a.cmd.Start()
	}
	if err != nil {
		return vectors.Binding{}, fmt.Errorf("adapter %q: %w", command, err)
	}
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<16)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(a.lines)
				return
			}
			a.lines <- line
		}
	}()
	var hello struct {
		Implementation string               `json:"implementation"`
		Profiles       []string             `json:"profiles"`
		Features       []string             `json:"features"`
		Declarations   vectors.Declarations `json:"declarations"`
		Unsupported    []string             `json:"unsupported_commands"`
	}
	answer, err := a.request("hello", map[string]any{"protocol_version": 1})
	if err == nil {
		err = remarshal(answer["result"], &hello)
	}
	if err != nil {
		a.Close()
		return vectors.Binding{}, fmt.Errorf("adapter %q: hello: %w", command, err)
	}
	return vectors.Binding{Name: hello.Implementation, Level: level, Declarations: hello.Declarations,
		Profiles: hello.Profiles, Unsupported: hello.Unsupported, Features: hello.Features, System: a}, nil
}

func (a *Adapter) Init(profile string, p vectors.Params) error {
	_, err := a.request("init", map[string]any{"profile": profile, "params": p})
	return err
}

func (a *Adapter) Step(cmd string, args map[string]any) (vectors.Observation, error) {
	answer, err := a.request(cmd, args)
	if err != nil {
		return vectors.Observation{}, err
	}
	var o vectors.Observation
	return o, remarshal(answer, &o)
}

// Close ends the adapter's input and waits for it to exit.
func (a *Adapter) Close() error {
	a.stdin.Close()
	return a.cmd.Wait()
}

// request sends one request and returns its response; a failure, a late, missing or mis-sequenced answer is an error.
func (a *Adapter) request(cmd string, args map[string]any) (map[string]any, error) {
	seq := a.seq
	a.seq++
	line, _ := json.Marshal(map[string]any{"seq": seq, "cmd": cmd, "args": args})
	if _, err := a.stdin.Write(append(line, '\n')); err != nil {
		return nil, fmt.Errorf("writing to the adapter: %w%s", err, a.stderr)
	}
	var raw []byte
	select {
	case l, ok := <-a.lines:
		if !ok {
			return nil, fmt.Errorf("the adapter closed its output%s", a.stderr)
		}
		raw = l
	case <-time.After(Timeout):
		return nil, fmt.Errorf("no response within %v%s", Timeout, a.stderr)
	}
	var answer map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&answer); err != nil {
		return nil, fmt.Errorf("response is not JSON (%v): %q", err, raw)
	}
	if fmt.Sprint(answer["seq"]) != fmt.Sprint(seq) {
		return nil, fmt.Errorf("response has seq %v, expected %d", answer["seq"], seq)
	}
	if failure, ok := answer["failure"]; ok {
		return nil, fmt.Errorf("the adapter reported a failure: %q%s", fmt.Sprint(failure), a.stderr)
	}
	return answer, nil
}

// remarshal decodes a decoded JSON value into a typed one, keeping numbers exact.
func remarshal(from any, into any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(into); err != nil {
		return errors.New("unexpected response shape: " + err.Error())
	}
	return nil
}

// tail keeps the end of the adapter's standard error, shown (escaped) with an error.
type tail struct {
	mu   sync.Mutex
	data []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.data = append(t.data, p...)
	if len(t.data) > 2000 {
		t.data = t.data[len(t.data)-2000:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.data) == 0 {
		return ""
	}
	return fmt.Sprintf("; adapter's stderr ends: %q", t.data)
}
