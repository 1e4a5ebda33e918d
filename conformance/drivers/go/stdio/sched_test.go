package stdio_test

import (
	"bufio"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"testing"
	"time"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
	"github.com/kpurgatory/kpurgatory/conformance/drivers/go/stdio"
)

// nested is a system whose every command takes lock a, then lock b inside it.
type nested struct{ a, b *vectors.Mutex }

func (n *nested) Init(string, vectors.Params) error { return nil }

func (n *nested) Step(string, map[string]any) (vectors.Observation, error) {
	n.a.Lock()
	n.b.Lock()
	n.b.Unlock()
	n.a.Unlock()
	return vectors.Observation{Result: int64(0)}, nil
}

// session is Serve on the far side of two pipes, read line by line.
type session struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan map[string]any
}

func start(t *testing.T, b vectors.Binding) *session {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &session{t: t, in: inW, lines: make(chan map[string]any, 16)}
	go func() { _ = stdio.Serve(b, inR, outW); outW.Close() }()
	go func() {
		scanner := bufio.NewScanner(outR)
		for scanner.Scan() {
			var line map[string]any
			if err := json.Unmarshal(scanner.Bytes(), &line); err != nil {
				t.Errorf("%v: %q", err, scanner.Text())
			}
			s.lines <- line
		}
		close(s.lines)
	}()
	return s
}

func (s *session) send(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatal(err)
	}
}

// expect reads the next line, which must hold every field of want (numbers as JSON reads them: float64).
func (s *session) expect(want map[string]any) map[string]any {
	s.t.Helper()
	select {
	case got := <-s.lines:
		for field, value := range want {
			if !reflect.DeepEqual(got[field], value) {
				s.t.Fatalf("line %v: %s is %v, not %v", got, field, got[field], value)
			}
		}
		return got
	case <-time.After(5 * time.Second):
		s.t.Fatalf("no line within 5 s; expected %v", want)
	}
	return nil
}

// quiet asserts that Serve writes nothing for a while: the scheduled goroutines wait for their go.
func (s *session) quiet() {
	s.t.Helper()
	select {
	case got := <-s.lines:
		s.t.Fatalf("a line while every scheduled request waits for its go: %v", got)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestScheduledRequestsRunOnlyAtTheHarnesssGo: a concurrent binding lists the scheduler; a scheduled request stops
// at each Mutex's point and goes on only at its go; one that finds a lock held says wait, and takes it after its
// holder said released; unscheduled requests of the same binding take the locks as plain mutexes.
func TestScheduledRequestsRunOnlyAtTheHarnesssGo(t *testing.T) {
	b := vectors.Binding{Name: "nested locks", Profiles: []string{"purgatory"}, Concurrent: true,
		System: &nested{a: vectors.NewMutex("a"), b: vectors.NewMutex("b")}}
	s := start(t, b)
	s.send(`{"seq":0,"cmd":"hello","args":{"protocol_version":1}}`)
	features := s.expect(map[string]any{"seq": 0.0})["result"].(map[string]any)["features"].([]any)
	for _, feature := range []string{"batch", "concurrent", "scheduler"} {
		if !slices.Contains(features, any(feature)) {
			t.Errorf("hello's features %v lack %s", features, feature)
		}
	}
	s.send(`{"seq":1,"cmd":"init","args":{"profile":"purgatory","params":{}}}`)
	s.expect(map[string]any{"seq": 1.0, "result": nil})
	s.send(`{"seq":2,"cmd":"check","args":{}}`)
	s.expect(map[string]any{"seq": 2.0, "result": 0.0})

	s.send(`{"seq":3,"cmd":"check","args":{},"scheduled":true}`)
	s.expect(map[string]any{"seq": 3.0, "sched": "point", "kind": "acquire", "where": "a in Step"})
	s.quiet()
	s.send(`{"go":3}`)
	s.expect(map[string]any{"seq": 3.0, "sched": "point", "kind": "acquire", "where": "b in Step"})
	// 3 holds a, stopped before b: 4 stops before a, then finds it held
	s.send(`{"seq":4,"cmd":"check","args":{},"scheduled":true}`)
	s.expect(map[string]any{"seq": 4.0, "sched": "point", "where": "a in Step"})
	s.send(`{"go":4}`)
	wait := s.expect(map[string]any{"seq": 4.0, "sched": "wait", "role": "a"})
	s.quiet()
	s.send(`{"go":3}`)
	s.expect(map[string]any{"seq": 3.0, "sched": "released", "role": "b"})
	s.expect(map[string]any{"seq": 3.0, "sched": "released", "role": "a", "lock": wait["lock"]})
	s.expect(map[string]any{"seq": 3.0, "result": 0.0})
	s.send(`{"go":4}`)
	s.expect(map[string]any{"seq": 4.0, "sched": "point", "where": "b in Step"})
	s.send(`{"go":4}`)
	s.expect(map[string]any{"seq": 4.0, "sched": "released", "role": "b"})
	s.expect(map[string]any{"seq": 4.0, "sched": "released", "role": "a"})
	s.expect(map[string]any{"seq": 4.0, "result": 0.0})

	// a deadlock's go fails the waiting request, with the reason
	s.send(`{"seq":5,"cmd":"check","args":{},"scheduled":true}`)
	s.expect(map[string]any{"seq": 5.0, "sched": "point", "where": "a in Step"})
	s.send(`{"go":5}`)
	s.expect(map[string]any{"seq": 5.0, "sched": "point", "where": "b in Step"})
	s.send(`{"seq":6,"cmd":"check","args":{},"scheduled":true}`)
	s.expect(map[string]any{"seq": 6.0, "sched": "point", "where": "a in Step"})
	s.send(`{"go":6}`)
	s.expect(map[string]any{"seq": 6.0, "sched": "wait"})
	s.send(`{"go":6,"deadlock":true}`)
	if failure, _ := s.expect(map[string]any{"seq": 6.0})["failure"].(string); failure == "" {
		t.Error("a deadlock's go did not fail the request")
	}
	s.send(`{"go":5}`)
	s.expect(map[string]any{"seq": 5.0, "sched": "released", "role": "b"})
	s.expect(map[string]any{"seq": 5.0, "sched": "released", "role": "a"})
	s.expect(map[string]any{"seq": 5.0, "result": 0.0})
	s.in.Close()
	if _, open := <-s.lines; open {
		t.Error("Serve wrote more after the end of its input")
	}
}
