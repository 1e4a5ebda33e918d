package stdio

import (
	"bufio"
	"encoding/json"
	"io"

	"kpurgatory/driver"
)

// Serve is the other side: it serves a binding as an adapter on in and out (specs/protocol.md), so that
// `kpurgatory check --adapter CMD` can drive a Go implementation with generated runs and shrink what it finds.
func Serve(b driver.Binding, in io.Reader, out io.Writer) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(nil, 16<<20)
	encoder := json.NewEncoder(out)
	for scanner.Scan() {
		var request struct {
			Seq  json.Number    `json:"seq"`
			Cmd  string         `json:"cmd"`
			Args map[string]any `json:"args"`
		}
		response := map[string]any{"events": []driver.Event{}, "result": nil}
		err := remarshal(json.RawMessage(scanner.Bytes()), &request)
		if request.Seq == "" {
			request.Seq = "0"
		}
		response["seq"] = request.Seq
		if err == nil {
			err = answer(b, request.Cmd, request.Args, response)
		}
		if err != nil {
			response = map[string]any{"seq": request.Seq, "failure": err.Error()}
		}
		if err := encoder.Encode(response); err != nil {
			return err
		}
	}
	return scanner.Err()
}

func answer(b driver.Binding, cmd string, args map[string]any, response map[string]any) error {
	switch cmd {
	case "hello":
		hello := map[string]any{"protocol_version": 1, "implementation": b.Name, "profiles": b.Profiles,
			"features": append([]string{}, b.Features...), "declarations": b.Declarations}
		if len(b.Unsupported) > 0 {
			hello["unsupported_commands"] = b.Unsupported
		}
		response["result"] = hello
		return nil
	case "init":
		var init struct {
			Profile string        `json:"profile"`
			Params  driver.Params `json:"params"`
		}
		if err := remarshal(args, &init); err != nil {
			return err
		}
		return b.System.Init(init.Profile, init.Params)
	}
	o, err := b.System.Step(cmd, args)
	response["result"], response["events"] = o.Result, driver.NonNil(o.Events)
	if o.Error != "" {
		response["error"] = o.Error
	}
	return err
}
