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
	RunsDueOnUpdate   bool   `json:"runs_due_on_update,omitempty"`
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
	// Concurrent says that System is safe for concurrent use, its locks made with NewMutex: Serve then runs requests
	// concurrently and lists the features concurrent and scheduler (`kpurgatory check --threads N [--scheduler S]`).
	Concurrent bool
	// Accepts says why a case's params cannot be run ("" when they can); nil accepts all.
	Accepts func(profile string, p Params) string
	System  System
}

type index struct {
	Format       string              `json:"format"`
	Version      int                 `json:"version"`
	KafkaVersion *string             `json:"kafka_version"`
	Families     [][]json.RawMessage `json:"families"`
	Cases        []indexCase         `json:"cases"`
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
		Groups          []int             `json:"groups"`
		DeadlineMs      deadline          `json:"deadline_ms"`
		Windows         map[string]window `json:"windows"`
		RelistCompleted bool              `json:"relist_completed"`
		Kafka           *kafka            `json:"kafka"`
	} `json:"expect"`
	line map[string]any // the case's line as read, for the observed trace
}

// deadline is expect.deadline_ms: set when the member is there, ms nil when it is null (beyond 2^63-1).
type deadline struct {
	set bool
	ms  *int64
}

func (d *deadline) UnmarshalJSON(data []byte) error {
	d.set = true
	return json.Unmarshal(data, &d.ms)
}

// window is a firing window [lo, hi] of expect.windows. hi is nil when the spec writes null, the window's end lying
// past 2^63-1 (specs/vectors.md §2): no advance reaches it, so the entry is never late. It is not clamped to
// math.MaxInt64, as an entry whose hi is exactly 2^63-1 is late after an advance to 2^63-1.
type window struct {
	lo int64
	hi *int64
}

func (w *window) UnmarshalJSON(data []byte) error {
	var pair [2]*int64
	if err := json.Unmarshal(data, &pair); err != nil {
		return err
	}
	if pair[0] == nil {
		return fmt.Errorf("window %s: lo is missing or null", data)
	}
	w.lo, w.hi = *pair[0], pair[1]
	return nil
}

// lateAt says whether the entry is still pending past its window's end after an advance to now.
func (w window) lateAt(now int64) bool { return w.hi != nil && *w.hi <= now }

func (w window) String() string {
	if w.hi == nil {
		return fmt.Sprintf("[%d, null]", w.lo)
	}
	return fmt.Sprintf("[%d, %d]", w.lo, *w.hi)
}

// kafka is expect.kafka: what Kafka's own timer does at a step of one of its findings (specs/vectors.md §5.4).
type kafka struct {
	Finding  string   `json:"finding"`
	Answers  bool     `json:"answers"`
	Fails    []string `json:"fails"`
	Hangs    bool     `json:"hangs"`
	Crashes  bool     `json:"crashes"`
	Runs     []string `json:"runs"`
	Anything bool     `json:"anything"`
}

type result struct {
	Path     string  `json:"path"`
	Verdict  string  `json:"verdict"`
	Reason   *string `json:"reason"`
	Step     *int64  `json:"step"`
	Observed *string `json:"observed"`
	Finding  *string `json:"finding,omitempty"`
}

// outcome is a case's result and what the runner prints for it.
type outcome struct {
	result
	message string   // the failure report
	logs    []string // notes printed with the case
}

// decode reads one JSON value with integers kept exact (json.Number, never float64).
func decode(data []byte, into any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(into)
}

// Run runs every case of the tree named by KPURGATORY_VECTORS as a subtest named by the case's path. An in-process
// binding runs in a child process of the test (supervise.go); one behind a stdio adapter is already in one.
func Run(t *testing.T, b Binding) {
	if isChild(t) {
		serveChild(t, b)
		return
	}
	root := os.Getenv("KPURGATORY_VECTORS")
	if root == "" {
		t.Fatal("KPURGATORY_VECTORS is not set: point it at a vector tree (generate one with `kpurgatory vectors DIR`)")
	}
	data, err := os.ReadFile(filepath.Join(root, "index.json"))
	if err != nil {
		t.Fatalf("KPURGATORY_VECTORS=%s: %v (generate a tree with `kpurgatory vectors DIR`)", root, err)
	}
	var tree index
	if err := decode(data, &tree); err != nil || tree.Format != "kpurgatory-vectors" || tree.Version != 1 {
		t.Fatalf("%s/index.json: not a version 1 kpurgatory-vectors index (%v)", root, err)
	}
	families, err := familiesOf(tree.Families)
	if err != nil {
		t.Fatalf("%s/index.json: families: %v", root, err)
	}
	system := b.System
	if _, ok := system.(OutOfProcess); !ok {
		if system, err = child(t, b); err != nil {
			t.Fatalf("starting the binding in a child process: %v", err)
		}
		defer Close(system)
	}
	var results []result
	ran, skips := 0, map[string]int{}
	for _, c := range tree.Cases {
		t.Run(c.Path, func(t *testing.T) {
			o := outcome{result: result{Path: c.Path, Verdict: "skip"}}
			if why := b.skip(c); why != "" {
				o.Reason = &why
			} else {
				o = b.runCase(system, root, c, families)
			}
			results = append(results, o.result)
			if o.Verdict == "skip" {
				skips[*o.Reason]++
			} else {
				ran++
			}
			for _, line := range o.logs {
				t.Log(line)
			}
			switch o.Verdict {
			case "fail":
				t.Error(o.message)
			case "skip":
				t.Skip(*o.Reason)
			}
		})
	}
	if ran == 0 {
		t.Error(noCaseRan(skips, b.Declarations.KafkaVersion, tree.KafkaVersion))
	}
	if path := os.Getenv("KPURGATORY_VECTORS_RESULTS"); path != "" {
		out := map[string]any{"format": "kpurgatory-vector-results", "version": 1, "driver": "go",
			"implementation": b.Name, "level": b.Level, "declarations": b.Declarations, "cases": results}
		if err := writeJSON(path, out); err != nil {
			t.Errorf("KPURGATORY_VECTORS_RESULTS: %v", err)
		}
	}
}

// noCaseRan is the failure of a run that checked nothing (specs/vectors.md §3): the skips by reason, and the tree
// the binding needs when it follows another Kafka release than the tree.
func noCaseRan(skips map[string]int, declared string, tree *string) string {
	message := "no case ran: a run that checks nothing does not pass"
	var reasons []string
	for reason := range skips {
		reasons = append(reasons, reason)
	}
	slices.Sort(reasons)
	for _, reason := range reasons {
		message += fmt.Sprintf("\n  %d skipped: %s", skips[reason], reason)
	}
	made := ""
	if tree != nil {
		made = *tree
	}
	if declared != made {
		option := ""
		if declared != "" {
			option = " --kafka-version " + declared
		}
		message += fmt.Sprintf("\n  the tree is made for Kafka %q, the binding declares %q: make one for it with "+
			"`kpurgatory vectors DIR%s`", made, declared, option)
	}
	return message
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

// runCase runs one case on system, a fresh instance of the binding's implementation.
func (b Binding) runCase(system System, root string, c indexCase, families []family) outcome {
	o := outcome{result: result{Path: c.Path, Verdict: "pass"}}
	header, steps, err := readCase(filepath.Join(root, c.Path))
	if err == nil {
		if err = system.Init(c.Profile, c.Params); err != nil {
			err = fmt.Errorf("init %s: %w", canonical(c.Params), err)
		}
	}
	if err != nil {
		why := c.Path + ": " + err.Error()
		o.Verdict, o.Reason, o.message = "fail", &why, why
		return o
	}
	var j judge = exact{}
	if b.Level == "contract" {
		j = newContract(b.Declarations, c.Profile, c.Params)
	}
	answers := map[*step]map[string]any{}
	omitted := 0
	for i, s := range steps {
		if b.omits(s.Cmd) {
			omitted++
			continue
		}
		if j.undefined(s) {
			o.logs = append(o.logs, fmt.Sprintf("%s: step %d (%s) is outside what the binding declares; judged up to there",
				c.Path, s.Seq, s.Cmd))
			break
		}
		got, err := system.Step(s.Cmd, s.Args)
		if errors.Is(err, ErrCannotRun) {
			why := fmt.Sprintf("step %d (%s): %v", s.Seq, s.Cmd, err)
			o.Verdict, o.Reason = "skip", &why
			return o
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
		if problem == "" {
			continue
		}
		if k := s.Expect.Kafka; k != nil && k.matches(got, err, families) {
			// Kafka's own timer does this here: a binding following Kafka passes, any other fails by that name
			problem = "as Kafka does: " + k.Finding + ": " + problem
			o.Finding = &k.Finding
			if b.Declarations.KafkaVersion != "" {
				o.Reason = &problem
				o.logs = append(o.logs, fmt.Sprintf("%s: step %d (%s): %s", c.Path, s.Seq, s.Cmd, problem))
				return o
			}
		}
		observed := b.writeObserved(c, header, steps[:i+1], answers, &o)
		expected := map[string]any{"result": s.Result, "events": NonNil(s.Events)}
		if s.Error != "" {
			expected["error"] = s.Error
		}
		o.message = fmt.Sprintf("%s: step %d (%s %s): %s\n  expected (model): %s\n  observed:         %s\n"+
			"  observed run: %s\n  replay it with the HTML view: kpurgatory replay %s --level %s",
			c.Path, s.Seq, s.Cmd, canonical(s.Args), problem, canonical(expected), canonical(answer),
			observed, observed, b.Level)
		o.Verdict, o.Reason, o.Step, o.Observed = "fail", &problem, &s.Seq, &observed
		return o
	}
	if omitted > 0 {
		o.logs = append(o.logs, fmt.Sprintf("%s: %d queries the binding does not support were left out", c.Path, omitted))
	}
	return o
}

// matches says whether what the binding did at the step (its answer, or err when it gave none) is what Kafka's own
// timer does there (specs/vectors.md §5.4).
func (k *kafka) matches(got Observation, err error, families []family) bool {
	switch {
	case k.Anything:
		return true
	case err == nil:
		for _, e := range got.Events {
			if e["event"] == "run" && slices.Contains(k.Runs, str(e, "task")) ||
				e["event"] == "expire" && slices.Contains(k.Runs, str(e, "op")) {
				return true
			}
		}
		return k.Answers && got.Error == ""
	case errors.Is(err, ErrHung):
		return k.Hangs
	}
	return slices.Contains(k.Fails, familyOf(err.Error(), families)) || k.Crashes && errors.Is(err, ErrCrashed)
}

// family is one of the index's classes of failure texts, whatever the language (specs/vectors.md §1.1).
type family struct {
	name  string
	words []string
}

// familiesOf reads index.json's families, [name, [substring…]] each, in their order: the first that matches wins.
func familiesOf(pairs [][]json.RawMessage) (out []family, err error) {
	for _, pair := range pairs {
		var f family
		if len(pair) != 2 {
			return nil, fmt.Errorf("%s is not [name, [substring…]]", pair)
		}
		if err = json.Unmarshal(pair[0], &f.name); err == nil {
			err = json.Unmarshal(pair[1], &f.words)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// familyOf is the family of a failure text ("" when none).
func familyOf(text string, families []family) string {
	text = strings.ToLower(text)
	for _, f := range families {
		for _, word := range f.words {
			if strings.Contains(text, word) {
				return f.name
			}
		}
	}
	return ""
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
func (b Binding) writeObserved(c indexCase, header map[string]any, steps []*step, answers map[*step]map[string]any, o *outcome) string {
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
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(path, out.Bytes(), 0o644)
	}
	if err != nil {
		o.logs = append(o.logs, fmt.Sprintf("KPURGATORY_VECTORS_OUT: %v", err))
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
