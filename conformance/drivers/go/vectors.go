// Package vectors runs kpurgatory's test vectors (specs/vectors.md) against a timer or a purgatory from `go test`:
// one subtest per applicable case, judged at the exact or the contract level without the model.
package vectors

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Declarations are what a binding promises where it is not Kafka (specs/protocol.md §3); zero values are Kafka's.
type Declarations struct {
	Firing            string `json:"firing,omitempty"`
	LazySize          bool   `json:"lazy_size,omitempty"`
	MaxDeadlineMs     *int64 `json:"max_deadline_ms,omitempty"`
	BeyondMaxDeadline string `json:"beyond_max_deadline,omitempty"`
	NegativeDelays    string `json:"negative_delays,omitempty"`
	KafkaVersion      string `json:"kafka_version,omitempty"`
}

// Binding is an implementation as the driver sees it.
type Binding struct {
	Name         string // written into observed traces and the results file
	Level        string // "exact" or "contract"
	Declarations Declarations
	Profiles     []string
	Unsupported  []string // commands it has no call for
	Features     []string // the read-outs it supports: wheel, delay_queue, watcher_keys
	// Accepts says why a case's params cannot be run ("" when they can); nil accepts all.
	Accepts func(profile string, p Params) string
	System  System
}

type indexCase struct {
	Path         string   `json:"path"`
	Profile      string   `json:"profile"`
	ID           string   `json:"id"`
	Params       Params   `json:"params"`
	Commands     []string `json:"commands"`
	Features     []string `json:"features"`
	KafkaVersion *string  `json:"kafka_version"`
}

type step struct {
	Seq    int64          `json:"seq"`
	Cmd    string         `json:"cmd"`
	Args   map[string]any `json:"args"`
	Result any            `json:"result"`
	Events []Event        `json:"events"`
	Error  string         `json:"error"`
	Expect struct {
		Groups     []int               `json:"groups"`
		DeadlineMs *int64              `json:"deadline_ms"`
		Windows    map[string][2]int64 `json:"windows"`
	} `json:"expect"`
	line map[string]any // the case's line as read, for the observed trace
}

type result struct {
	Path     string  `json:"path"`
	Verdict  string  `json:"verdict"`
	Reason   *string `json:"reason"`
	Step     *int64  `json:"step"`
	Observed *string `json:"observed"`
}

// decode reads one JSON value with integers kept exact (json.Number, never float64).
func decode(data []byte, into any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(into)
}

// Run runs every case of the tree named by KPURGATORY_VECTORS as a subtest named by the case's path.
func Run(t *testing.T, b Binding) {
	root := os.Getenv("KPURGATORY_VECTORS")
	if root == "" {
		t.Fatal("KPURGATORY_VECTORS is not set: point it at a vector tree (generate one with `kpurgatory vectors DIR`)")
	}
	data, err := os.ReadFile(filepath.Join(root, "index.json"))
	if err != nil {
		t.Fatalf("KPURGATORY_VECTORS=%s: %v (generate a tree with `kpurgatory vectors DIR`)", root, err)
	}
	var index struct {
		Format  string      `json:"format"`
		Version int         `json:"version"`
		Cases   []indexCase `json:"cases"`
	}
	if err := decode(data, &index); err != nil || index.Format != "kpurgatory-vectors" || index.Version != 1 {
		t.Fatalf("%s/index.json: not a version 1 kpurgatory-vectors index (%v)", root, err)
	}
	if b.Level == "contract" {
		t.Log("purgatory cases at the contract level are judged by `kpurgatory check/replay --level contract` " +
			"through the stdio adapter, not by this driver")
	}
	var results []result
	for _, c := range index.Cases {
		var r result
		t.Run(c.Path, func(t *testing.T) {
			r = b.runCase(t, root, c)
			if r.Verdict == "skip" {
				t.Skip(*r.Reason)
			}
		})
		results = append(results, r)
	}
	if path := os.Getenv("KPURGATORY_VECTORS_RESULTS"); path != "" {
		out := map[string]any{"format": "kpurgatory-vector-results", "version": 1, "driver": "go",
			"implementation": b.Name, "level": b.Level, "declarations": b.Declarations, "cases": results}
		if err := writeJSON(path, out); err != nil {
			t.Errorf("KPURGATORY_VECTORS_RESULTS: %v", err)
		}
	}
}

// skip says why the binding cannot run a case ("" when it can).
func (b Binding) skip(c indexCase) string {
	release := ""
	if c.KafkaVersion != nil {
		release = *c.KafkaVersion
	}
	switch {
	case !slices.Contains(b.Profiles, c.Profile):
		return "profile " + c.Profile + " is not implemented"
	case b.Level == "contract" && c.Profile == "purgatory":
		return "purgatory at the contract level: judged by `kpurgatory replay CASE --level contract` through the stdio adapter"
	case release != b.Declarations.KafkaVersion:
		return fmt.Sprintf("about Kafka release %q; the binding declares %q", release, b.Declarations.KafkaVersion)
	}
	for _, cmd := range slices.Concat(c.Commands, c.Features) {
		if b.lacks(cmd) && !b.omits(cmd) {
			return "uses " + cmd + ", which the binding does not support"
		}
	}
	if b.Accepts != nil {
		return b.Accepts(c.Profile, c.Params)
	}
	return ""
}

var (
	readOuts = []string{"wheel", "delay_queue", "watcher_keys"}
	counters = []string{"size", "delayed", "watched"}
)

func (b Binding) lacks(cmd string) bool {
	if slices.Contains(readOuts, cmd) {
		return !slices.Contains(b.Features, cmd)
	}
	return slices.Contains(b.Unsupported, cmd)
}

// omits: queries change nothing, so at the contract level, where read-outs are not judged, the queries a binding
// lacks are left out of the run rather than the whole case (a timer with no size still shows when its tasks fire).
func (b Binding) omits(cmd string) bool {
	return b.Level == "contract" && b.lacks(cmd) && (slices.Contains(readOuts, cmd) || slices.Contains(counters, cmd))
}

// runCase runs one case and reports a failure through t.
func (b Binding) runCase(t *testing.T, root string, c indexCase) result {
	r := result{Path: c.Path, Verdict: "skip"}
	if why := b.skip(c); why != "" {
		r.Reason = &why
		return r
	}
	header, steps, err := readCase(filepath.Join(root, c.Path))
	if err == nil {
		if err = b.System.Init(c.Profile, c.Params); err != nil {
			err = fmt.Errorf("init %s: %w", canonical(c.Params), err)
		}
	}
	if err != nil {
		why := err.Error()
		t.Errorf("%s: %s", c.Path, why)
		return result{Path: c.Path, Verdict: "fail", Reason: &why}
	}
	var j judge = exact{}
	if b.Level == "contract" {
		j = newContract(b.Declarations, c.Params)
	}
	answers := map[*step]map[string]any{}
	omitted := 0
	for i, s := range steps {
		if b.omits(s.Cmd) {
			omitted++
			continue
		}
		if j.undefined(s) {
			t.Logf("%s: step %d (%s) is outside what the binding declares; judged up to there", c.Path, s.Seq, s.Cmd)
			break
		}
		got, err := b.System.Step(s.Cmd, s.Args)
		if errors.Is(err, ErrCannotRun) {
			why := fmt.Sprintf("step %d (%s): %v", s.Seq, s.Cmd, err)
			r.Reason = &why
			return r
		}
		got = normalized(got)
		answer := map[string]any{"result": got.Result, "events": NonNil(got.Events)}
		problem := ""
		if err != nil {
			answer, problem = map[string]any{"failure": err.Error()}, "the system failed: "+err.Error()
		} else {
			if got.Error != "" {
				answer["error"] = got.Error
			}
			problem = j.step(s, got)
		}
		answers[s] = answer
		if problem != "" {
			observed := b.writeObserved(t, c, header, steps[:i+1], answers)
			expected := map[string]any{"result": s.Result, "events": NonNil(s.Events)}
			if s.Error != "" {
				expected["error"] = s.Error
			}
			t.Errorf("%s: step %d (%s %s): %s\n  expected (model): %s\n  observed:         %s\n"+
				"  observed run: %s\n  replay it with the HTML view: kpurgatory replay %s --level %s",
				c.Path, s.Seq, s.Cmd, canonical(s.Args), problem, canonical(expected), canonical(answer),
				observed, observed, b.Level)
			return result{Path: c.Path, Verdict: "fail", Reason: &problem, Step: &s.Seq, Observed: &observed}
		}
	}
	if omitted > 0 {
		t.Logf("%s: %d queries the binding does not support were left out", c.Path, omitted)
	}
	r.Verdict = "pass"
	return r
}

func readCase(path string) (map[string]any, []*step, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var header map[string]any
	var steps []*step
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(nil, 16<<20)
	for n := 1; scanner.Scan(); n++ {
		var line map[string]any
		if err := decode(scanner.Bytes(), &line); err != nil {
			return nil, nil, fmt.Errorf("line %d: %v", n, err)
		}
		if header == nil {
			header = line
			continue
		}
		s := &step{line: line}
		if err := decode(scanner.Bytes(), s); err != nil {
			return nil, nil, fmt.Errorf("line %d: %v", n, err)
		}
		steps = append(steps, s)
	}
	return header, steps, scanner.Err()
}

// writeObserved writes the run up to the failing step as a trace whose steps carry what the system answered (a
// query left out has no answer: replay does not judge it).
func (b Binding) writeObserved(t *testing.T, c indexCase, header map[string]any, steps []*step, answers map[*step]map[string]any) string {
	dir := os.Getenv("KPURGATORY_VECTORS_OUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "kpurgatory-vectors")
	}
	path := filepath.Join(dir, strings.ReplaceAll(c.ID, "/", "_")+".observed.jsonl")
	h := header["header"].(map[string]any)
	h["implementation"] = b.Name
	delete(h, "declarations")
	if b.Declarations != (Declarations{}) {
		h["declarations"] = b.Declarations
	}
	out := bytes.NewBufferString(canonical(header) + "\n")
	for _, s := range steps {
		if answer, ok := answers[s]; ok {
			s.line["system"] = answer
		}
		out.WriteString(canonical(s.line) + "\n")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("KPURGATORY_VECTORS_OUT: %v", err)
	} else if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Errorf("KPURGATORY_VECTORS_OUT: %v", err)
	}
	return path
}

func writeJSON(path string, value any) error {
	data, err := json.MarshalIndent(value, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// canonical is a value's JSON with object keys sorted, so that equal observations have equal texts.
func canonical(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(data)
}

// normalized is an observation as JSON reads it ([]string as []any, int64 as json.Number), whoever produced it.
func normalized(o Observation) Observation {
	var n Observation
	if data, err := json.Marshal(o); err != nil || decode(data, &n) != nil {
		return o
	}
	return n
}

// NonNil is the events, or an empty list: the protocol writes [] for none.
func NonNil(events []Event) []Event {
	if events == nil {
		return []Event{}
	}
	return events
}

const longMax = math.MaxInt64
