package vectors

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
)

// Serve is the other side: it serves a binding as an adapter on in and out (specs/protocol.md), so that
// `kpurgatory check --adapter CMD` can drive a Go implementation with generated runs and shrink what it finds (the
// driver serves an in-process binding so too, from a child process of the test: supervise.go). A binding that is
// Concurrent gets each request but hello, init, shutdown and batch on a goroutine of its own, answered when done, and
// can be scheduled (sched.go).
func Serve(b Binding, in io.Reader, out io.Writer) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(nil, 16<<20)
	encoder := json.NewEncoder(out)
	var writing sync.Mutex
	var written error
	write := func(line map[string]any) {
		writing.Lock()
		defer writing.Unlock()
		if err := encoder.Encode(line); err != nil && written == nil {
			written = err
		}
	}
	turns.write = write
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	for scanner.Scan() {
		var r request
		if err := remarshal(json.RawMessage(scanner.Bytes()), &r); err != nil {
			write(map[string]any{"seq": json.Number("0"), "failure": err.Error()})
			continue
		}
		if r.Cmd == "" && r.Go != "" { // the scheduler's go for a scheduled request
			if err := turns.give(r.Go, r.Deadlock); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			continue
		}
		if r.Seq == "" {
			r.Seq = "0"
		}
		if !b.Concurrent || alone[r.Cmd] {
			inFlight.Wait() // the harness sends these once every earlier request was answered
			response := respond(b, r)
			response["seq"] = r.Seq
			write(response)
			continue
		}
		var scheduled *turn
		if r.Scheduled {
			scheduled = turns.begin(r.Seq)
		}
		inFlight.Add(1)
		go func() {
			defer inFlight.Done()
			response := respond(b, r)
			if scheduled != nil {
				turns.end(scheduled)
			}
			response["seq"] = r.Seq
			write(response)
		}()
	}
	inFlight.Wait()
	writing.Lock()
	defer writing.Unlock()
	if written != nil {
		return written
	}
	return scanner.Err()
}

// alone are the requests a concurrent binding still runs one at a time (specs/protocol.md §3).
var alone = map[string]bool{"hello": true, "init": true, "shutdown": true, "batch": true}

type request struct {
	Seq       json.Number    `json:"seq"`
	Cmd       string         `json:"cmd"`
	Args      map[string]any `json:"args"`
	Scheduled bool           `json:"scheduled"`
	Go        json.Number    `json:"go"`
	Deadlock  bool           `json:"deadlock"`
}

// respond answers one request, alone or in a batch: its observation, or a failure when it could not be executed
// (a panic is one, with its text: the instance is not used again before the next init).
func respond(b Binding, r request) (response map[string]any) {
	defer func() {
		if p := recover(); p != nil {
			response = map[string]any{"failure": fmt.Sprintf("%s panicked: %v", r.Cmd, p)}
		}
	}()
	response = map[string]any{"events": []Event{}, "result": nil}
	if err := answer(b, r.Cmd, r.Args, response); err != nil {
		return map[string]any{"failure": err.Error()}
	}
	return response
}

// batch answers a whole run in one request (specs/protocol.md §3.3): each request as if it came alone, and every
// one after a failure, up to the next init, skipped (a failure ends its run).
func batch(b Binding, requests []request) []map[string]any {
	answers, skipping := make([]map[string]any, 0, len(requests)), false
	for _, r := range requests {
		if skipping = skipping && r.Cmd != "init"; skipping {
			answers = append(answers, map[string]any{"skipped": true})
			continue
		}
		reply := respond(b, r)
		_, skipping = reply["failure"]
		answers = append(answers, reply)
	}
	return answers
}

// servedFeatures say how requests are served: Serve decides them itself (batch always, concurrent and scheduler for a
// Concurrent binding, barrier and gates never), whatever a binding made from another adapter's hello lists.
var servedFeatures = []string{"batch", "concurrent", "scheduler", "barrier", "gates"}

func answer(b Binding, cmd string, args map[string]any, response map[string]any) error {
	switch cmd {
	case "hello":
		features := []string{"batch"}
		if b.Concurrent {
			features = append(features, "concurrent", "scheduler")
		}
		for _, feature := range b.Features {
			if !slices.Contains(servedFeatures, feature) {
				features = append(features, feature)
			}
		}
		hello := map[string]any{"protocol_version": 1, "implementation": b.Name, "profiles": b.Profiles,
			"features": features, "declarations": b.Declarations}
		if len(b.Unsupported) > 0 {
			hello["unsupported_commands"] = b.Unsupported
		}
		response["result"] = hello
		return nil
	case "init":
		var init struct {
			Profile string `json:"profile"`
			Params  Params `json:"params"`
		}
		if err := remarshal(args, &init); err != nil {
			return err
		}
		return b.System.Init(init.Profile, init.Params)
	case "batch":
		var run struct {
			Requests []request `json:"requests"`
		}
		if err := remarshal(args, &run); err != nil {
			return err
		}
		response["result"] = batch(b, run.Requests)
		return nil
	}
	o, err := b.System.Step(cmd, args)
	response["result"], response["events"] = o.Result, NonNil(o.Events)
	if o.Error != "" {
		response["error"] = o.Error
	}
	return err
}
