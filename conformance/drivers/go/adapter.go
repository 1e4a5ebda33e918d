package vectors

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// adapter is a process speaking specs/protocol.md on its standard input and output: a stdio adapter, or the test
// binary itself serving an in-process binding (supervise.go). A call that outlives CallTimeout, or a process that
// dies, fails that call; the process is then killed and a new one started at the next Init.
type adapter struct {
	command func() *exec.Cmd
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan []byte
	stderr  *stderrHead
	seq     int64
	dead    bool
}

// hello is what an adapter says it is.
type hello struct {
	Implementation string       `json:"implementation"`
	Profiles       []string     `json:"profiles"`
	Features       []string     `json:"features"`
	Declarations   Declarations `json:"declarations"`
	Unsupported    []string     `json:"unsupported_commands"`
}

// StartAdapter starts the process command makes, says hello, and returns the binding the hello describes, judged
// at level. The stdio package's Start is this with `sh -c 'exec COMMAND'`.
func StartAdapter(command func() *exec.Cmd, level string) (Binding, error) {
	a := &adapter{command: command}
	h, err := a.start()
	if err != nil {
		return Binding{}, err
	}
	return Binding{Name: h.Implementation, Level: level, Declarations: h.Declarations, Profiles: h.Profiles,
		Unsupported: h.Unsupported, Features: h.Features, System: a}, nil
}

func (a *adapter) start() (hello, error) {
	var h hello
	a.cmd, a.lines, a.stderr, a.seq, a.dead = a.command(), make(chan []byte), &stderrHead{}, 0, false
	a.cmd.Stderr = a.stderr
	// a dead adapter's children may hold its pipes open: Wait gives up on them after this long
	a.cmd.WaitDelay = time.Second
	stdout, err := a.cmd.StdoutPipe()
	if err == nil {
		a.stdin, err = a.cmd.StdinPipe()
	}
	if err == nil {
		err = a.cmd.Start()
	}
	if err != nil {
		a.dead = true
		return h, fmt.Errorf("adapter %v: %w", a.cmd.Args, err)
	}
	go func(lines chan<- []byte) {
		r := bufio.NewReaderSize(stdout, 1<<16)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- line
		}
	}(a.lines)
	answer, err := a.request("hello", map[string]any{"protocol_version": 1})
	if err == nil {
		err = remarshal(answer["result"], &h)
	}
	if err != nil {
		a.stop()
		return h, fmt.Errorf("adapter %v: hello: %w", a.cmd.Args, err)
	}
	return h, nil
}

func (a *adapter) OutOfProcess() {}

func (a *adapter) Init(profile string, p Params) error {
	if a.dead {
		if _, err := a.start(); err != nil {
			return err
		}
	}
	_, err := a.request("init", map[string]any{"profile": profile, "params": p})
	return err
}

func (a *adapter) Step(cmd string, args map[string]any) (Observation, error) {
	answer, err := a.request(cmd, args)
	if err != nil {
		return Observation{}, err
	}
	var o Observation
	return o, remarshal(answer, &o)
}

// Close ends the adapter's input and waits for it to exit, for CallTimeout at most.
func (a *adapter) Close() error {
	if a.dead {
		return nil
	}
	a.dead = true
	a.stdin.Close()
	kill := time.AfterFunc(CallTimeout(), func() { a.cmd.Process.Kill() })
	defer kill.Stop()
	return a.cmd.Wait()
}

// stop kills the process; the next Init starts another.
func (a *adapter) stop() {
	if !a.dead {
		a.dead = true
		a.cmd.Process.Kill()
		a.cmd.Wait()
	}
}

// request sends one request and returns its response. No answer within CallTimeout is ErrHung, a process that
// ended is ErrCrashed (both kill it); a failure response, or one that is not the protocol's, is the error it says.
func (a *adapter) request(cmd string, args map[string]any) (map[string]any, error) {
	if a.dead {
		return nil, errors.New("the adapter stopped earlier in this case")
	}
	seq := a.seq
	a.seq++
	line, _ := json.Marshal(map[string]any{"seq": seq, "cmd": cmd, "args": args})
	a.stderr.reset()
	a.stdin.Write(append(line, '\n')) // a dead process shows as the end of its output, below
	timeout := CallTimeout()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var raw []byte
	select {
	case l, ok := <-a.lines:
		if !ok {
			a.stop()
			return nil, fmt.Errorf("%w: %s (%v, during %s)", ErrCrashed, a.stderr.said(), a.cmd.ProcessState, cmd)
		}
		raw = l
	case <-timer.C:
		a.stop()
		return nil, fmt.Errorf("%w: no answer to %s within %v", ErrHung, cmd, timeout)
	}
	var answer map[string]any
	if err := decode(raw, &answer); err != nil {
		return nil, fmt.Errorf("response is not JSON (%v): %q", err, raw)
	}
	if fmt.Sprint(answer["seq"]) != fmt.Sprint(seq) {
		return nil, fmt.Errorf("response has seq %v, expected %d", answer["seq"], seq)
	}
	if hung, ok := answer["hung"]; ok {
		return nil, fmt.Errorf("%w: %v", ErrHung, hung)
	}
	if failure, ok := answer["failure"]; ok {
		text := fmt.Sprint(failure)
		if reason, ok := strings.CutPrefix(text, ErrCannotRun.Error()); ok {
			return nil, fmt.Errorf("%w%s", ErrCannotRun, reason)
		}
		return nil, errors.New(text)
	}
	return answer, nil
}

// remarshal decodes a decoded JSON value into a typed one, keeping numbers exact.
func remarshal(from any, into any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	if err := decode(data, into); err != nil {
		return errors.New("unexpected response shape: " + err.Error())
	}
	return nil
}

// stderrHead keeps the start of what the adapter wrote to its standard error since the last request: where a
// crash's own words are (a runtime's stack dump follows them).
type stderrHead struct {
	mu   sync.Mutex
	data []byte
}

func (h *stderrHead) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.data = append(h.data, p[:min(len(p), 4096-min(len(h.data), 4096))]...)
	return len(p), nil
}

func (h *stderrHead) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.data = nil
}

// said is the first lines the process wrote to its standard error, or that it wrote nothing.
func (h *stderrHead) said() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	for _, line := range strings.Split(string(h.data), "\n") {
		if line = strings.TrimSpace(line); line != "" && len(lines) < 3 {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return "the adapter exited without a word on stderr"
	}
	return strings.Join(lines, "; ")
}
