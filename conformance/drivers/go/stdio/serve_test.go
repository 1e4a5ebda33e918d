package stdio_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
	"github.com/kpurgatory/kpurgatory/conformance/drivers/go/stdio"
)

// timer is just enough of a timer that an answer depends on the run before it.
type timer struct {
	now int64
	due map[string]int64
}

func (t *timer) Init(p vectors.Params) error {
	t.now, t.due = p.StartMs, map[string]int64{}
	return nil
}

func (t *timer) Add(task string, delayMs int64) ([]string, error) {
	if delayMs < 0 {
		return nil, vectors.ErrDelayOutOfRange
	}
	t.due[task] = t.now + delayMs
	return t.Advance(t.now)
}

func (t *timer) Cancel(task string) ([]string, error) {
	delete(t.due, task)
	return nil, nil
}

func (t *timer) Advance(toMs int64) (ran []string, err error) {
	t.now = toMs
	for task, due := range t.due {
		if due <= toMs {
			ran = append(ran, task)
			delete(t.due, task)
		}
	}
	slices.Sort(ran)
	return ran, nil
}

func (t *timer) Size() (int64, error) { return int64(len(t.due)), nil }

// serve runs Serve on the given request lines and returns its responses.
func serve(t *testing.T, lines []string) (responses []map[string]any) {
	t.Helper()
	b := vectors.Binding{Name: "test timer", Profiles: []string{"timer"}, System: vectors.TimerSystem(&timer{})}
	var out bytes.Buffer
	if err := stdio.Serve(b, strings.NewReader(strings.Join(lines, "\n")+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var response map[string]any
		if err := json.Unmarshal([]byte(line), &response); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		responses = append(responses, response)
	}
	return responses
}

// TestBatch: a batch is answered as its requests are one at a time, but for those after a failure (up to the next
// init), which are skipped.
func TestBatch(t *testing.T) {
	start := `{"cmd":"init","args":{"profile":"timer",` +
		`"params":{"tick_ms":1,"wheel_size":20,"start_ms":0,"purge_interval":1000}}}`
	requests := []string{start,
		`{"cmd":"timer_add","args":{"task":"a","delay_ms":5}}`,
		`{"cmd":"timer_add","args":{"task":"b","delay_ms":-1}}`, // delay_out_of_range: an observation, not a failure
		`{"cmd":"advance","args":{"to_ms":5}}`,
		`{"cmd":"no_such_command","args":{}}`,
		`{"cmd":"timer_add","args":{"task":"c","delay_ms":1}}`,
		`{"cmd":"size","args":{}}`,
		start,
		`{"cmd":"timer_add","args":{"task":"a","delay_ms":0}}`,
		`{"cmd":"timer_add","args":{"task":"d","delay_ms":3}}`,
		`{"cmd":"size","args":{}}`,
	}
	skipped := []int{5, 6}

	var alone []string
	for seq, r := range requests {
		alone = append(alone, fmt.Sprintf(`{"seq":%d,%s`, seq, r[1:]))
	}
	want := serve(t, alone)
	if _, failed := want[4]["failure"]; !failed {
		t.Fatalf("the unknown command was answered %v, not with a failure", want[4])
	}
	for i := range want {
		delete(want[i], "seq")
		if slices.Contains(skipped, i) {
			want[i] = map[string]any{"skipped": true}
		}
	}

	got := serve(t, []string{`{"seq":0,"cmd":"hello","args":{"protocol_version":1}}`,
		`{"seq":1,"cmd":"batch","args":{"requests":[` + strings.Join(requests, ",") + `]}}`})
	if features := got[0]["result"].(map[string]any)["features"]; !slices.Contains(features.([]any), "batch") {
		t.Errorf("hello's features %v lack batch", features)
	}
	if got[1]["seq"] != 1.0 || len(got[1]["events"].([]any)) != 0 {
		t.Errorf("the batch's own response is %v", got[1])
	}
	answers := got[1]["result"].([]any)
	if len(answers) != len(want) {
		t.Fatalf("%d answers to %d requests: %v", len(answers), len(want), answers)
	}
	for i, answer := range answers {
		if !reflect.DeepEqual(answer, want[i]) {
			t.Errorf("answer %d (%s): %v, alone %v", i, requests[i], answer, want[i])
		}
	}
}
