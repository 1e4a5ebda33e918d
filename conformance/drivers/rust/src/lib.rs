//! Runs kpurgatory's test vectors (its specs/vectors.md) against an implementation, one named `cargo test` case per
//! vector. An implementation is reached through a [`Binding`]: the [`stdio`] one speaks kpurgatory's
//! specs/protocol.md to any adapter process, [`TimerBinding`] wraps a Rust timer behind the small [`Timer`] trait.
//!
//! In a test target with `harness = false` (`tests/vectors.rs`):
//!
//! ```ignore
//! use kpurgatory_vectors::{Binding, Params, TimerBinding};
//!
//! fn my_wheel() -> Result<Box<dyn Binding>, String> {
//!     Ok(Box::new(TimerBinding::new("my-wheel 0.3", |params: &Params| MyWheel::new(params.tick_ms))))
//! }
//!
//! fn main() {
//!     kpurgatory_vectors::main(env!("CARGO_TARGET_TMPDIR"), &[("my-wheel", my_wheel)]);
//! }
//! ```

pub mod stdio;

pub use serde_json::json;

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::{env, fs};

pub type Json = Value;

/// What an implementation answered to one command (specs/protocol.md §6).
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub result: Json,
    pub events: Vec<Json>,
    pub error: Option<String>,
}

impl Observed {
    /// As a trace writes it: `error` only when there is one.
    fn to_json(&self) -> Json {
        let mut json = json!({"result": self.result, "events": self.events});
        if let Some(error) = &self.error {
            json["error"] = json!(error);
        }
        json
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Level {
    Exact,
    Contract,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Exact => "exact",
            Level::Contract => "contract",
        }
    }
}

/// What a binding is and promises: the fields of `hello` (specs/protocol.md §3) plus the level it is judged at.
#[derive(Clone, Debug)]
pub struct Info {
    pub implementation: String,
    pub level: Level,
    pub declarations: Map<String, Json>,
    pub profiles: Vec<String>,
    /// Optional read-outs it answers: `wheel`, `delay_queue`, `watcher_keys`.
    pub features: Vec<String>,
    pub unsupported_commands: Vec<String>,
}

/// The init of a run (specs/protocol.md §4).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub tick_ms: i64,
    pub wheel_size: i64,
    pub start_ms: i64,
    pub purge_interval: i64,
}

impl Params {
    fn parse(params: &Json) -> Result<Params, String> {
        let field = |name: &str| {
            params[name].as_i64().ok_or_else(|| format!("params.{name} is not a 64-bit integer: {}", params[name]))
        };
        Ok(Params {
            tick_ms: field("tick_ms")?,
            wheel_size: field("wheel_size")?,
            start_ms: field("start_ms")?,
            purge_interval: params.get("purge_interval").map_or(Ok(1000), |_| field("purge_interval"))?,
        })
    }
}

/// Why a system gave no answer.
#[derive(Debug)]
pub enum Refusal {
    /// It failed to answer (specs/protocol.md §6): the case fails.
    Failed(String),
    /// It cannot answer in bounded time by its design: the case is skipped with this reason.
    Unrunnable(String),
}

/// One run of an implementation.
pub trait System {
    fn call(&mut self, cmd: &str, args: &Json) -> Result<Observed, Refusal>;
}

pub trait Binding: Send + Sync {
    fn info(&self) -> &Info;
    /// Why the binding cannot run a case with these params, if it cannot.
    fn rejects(&self, _params: &Params) -> Option<String> {
        None
    }
    /// A fresh run, initialised with the case's profile and params.
    fn start(&self, profile: &str, params: &Json) -> Result<Box<dyn System>, String>;
}

/// The `delay_out_of_range` error: the delay is outside the domain the binding declares.
#[derive(Debug)]
pub struct Rejected;

/// An advance the timer cannot make in bounded time (say why): the case is skipped, not failed.
#[derive(Debug)]
pub struct Unrunnable(pub String);

/// A timer on a virtual clock (the `timer` profile). Tasks that become due run inside the call that made them due,
/// pushed to `ran` in the order they ran.
pub trait Timer {
    /// Schedule `task` at now + `delay_ms`; adding a pending task again moves it.
    fn add(&mut self, task: &str, delay_ms: i64, ran: &mut Vec<String>) -> Result<(), Rejected>;
    fn cancel(&mut self, task: &str);
    fn advance(&mut self, to_ms: i64, ran: &mut Vec<String>) -> Result<(), Unrunnable>;
    fn size(&self) -> u64;
    /// Stop and return the ids still pending (list `shutdown` in [`Info::unsupported_commands`] if there is no such
    /// call: the default is never called then).
    fn shutdown(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// A [`Binding`] for a [`Timer`] built from the run's params.
pub struct TimerBinding<T> {
    pub info: Info,
    pub new: fn(&Params) -> T,
    pub rejects: fn(&Params) -> Option<String>,
}

impl<T> TimerBinding<T> {
    /// A timer judged at the exact level, as a Kafka clone: the timer profile, no read-outs, every params taken.
    pub fn new(implementation: impl Into<String>, new: fn(&Params) -> T) -> TimerBinding<T> {
        let info = Info {
            implementation: implementation.into(),
            level: Level::Exact,
            declarations: Map::new(),
            profiles: vec!["timer".into()],
            features: Vec::new(),
            unsupported_commands: Vec::new(),
        };
        TimerBinding { info, new, rejects: |_| None }
    }

    /// Judged at the contract level under these declarations (a JSON object: what the timer promises where it is
    /// not Kafka, specs/protocol.md §3).
    pub fn contract(mut self, declarations: Json) -> TimerBinding<T> {
        let Json::Object(declarations) = declarations else { panic!("declarations are a JSON object: {declarations}") };
        self.info.level = Level::Contract;
        self.info.declarations = declarations;
        self
    }
}

impl<T: Timer + 'static> Binding for TimerBinding<T> {
    fn info(&self) -> &Info {
        &self.info
    }
    fn rejects(&self, params: &Params) -> Option<String> {
        (self.rejects)(params)
    }
    fn start(&self, _profile: &str, params: &Json) -> Result<Box<dyn System>, String> {
        let params = Params::parse(params)?;
        let new = self.new;
        let timer =
            catch_unwind(move || new(&params)).map_err(|panic| format!("init panicked: {}", panicked(&panic)))?;
        Ok(Box::new(TimerSystem(timer)))
    }
}

struct TimerSystem<T>(T);

impl<T: Timer> System for TimerSystem<T> {
    fn call(&mut self, cmd: &str, args: &Json) -> Result<Observed, Refusal> {
        let (timer, mut ran) = (&mut self.0, Vec::new());
        let bad = |name: &str, what: &str| Refusal::Failed(format!("{cmd}: {name} is not {what}"));
        let text = |name: &str| args[name].as_str().ok_or_else(|| bad(name, "a string"));
        let int = |name: &str| args[name].as_i64().ok_or_else(|| bad(name, "a 64-bit integer"));
        // A panic is the implementation failing to answer: the case stops there, so whatever state the panic left
        // half-changed is never used again.
        let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<Observed, Refusal> {
            let mut observed = Observed::default();
            match cmd {
                "timer_add" => {
                    if timer.add(text("task")?, int("delay_ms")?, &mut ran).is_err() {
                        observed.error = Some("delay_out_of_range".into())
                    }
                }
                "timer_cancel" => timer.cancel(text("task")?),
                "advance" => timer.advance(int("to_ms")?, &mut ran).map_err(|u| Refusal::Unrunnable(u.0))?,
                "size" => observed.result = json!(timer.size()),
                "shutdown" => {
                    let mut pending = timer.shutdown();
                    pending.sort();
                    observed.result = json!(pending)
                }
                _ => return Err(Refusal::Failed(format!("unsupported command {cmd}"))),
            }
            Ok(observed)
        }));
        let mut observed =
            outcome.map_err(|panic| Refusal::Failed(format!("{cmd} panicked: {}", panicked(&panic))))??;
        observed.events = ran.into_iter().map(|task| json!({"event": "run", "task": task})).collect();
        Ok(observed)
    }
}

fn panicked(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic.downcast_ref::<String>().cloned().or(panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

const READ_OUTS: [&str; 3] = ["wheel", "delay_queue", "watcher_keys"];
const PURGATORY_CONTRACT: &str = "purgatory cases at the contract level are judged by `kpurgatory check/replay \
     --level contract` through the stdio adapter";

/// Builds a binding; `Err` says why it cannot be had (its adapter would not start, a variable is missing).
pub type BuildBinding = fn() -> Result<Box<dyn Binding>, String>;

/// One line of a results file (the cross-implementation page reads these).
struct Verdict {
    path: String,
    verdict: &'static str,
    reason: Option<String>,
    step: Option<i64>,
    observed: Option<String>,
}

/// The test binary's `main`: runs every case of `$KPURGATORY_VECTORS` against the binding `$KPURGATORY_BINDING`
/// names (the first one when unset). Each binding is built only when chosen (the stdio one starts its adapter).
/// Observed runs of failed cases go to `$KPURGATORY_VECTORS_OUT`, else to `<tmp>/kpurgatory` (pass the test's
/// `env!("CARGO_TARGET_TMPDIR")`).
pub fn main(tmp: &str, bindings: &[(&str, BuildBinding)]) {
    let args = Arguments::from_args();
    let chosen = env::var("KPURGATORY_BINDING").unwrap_or_else(|_| bindings[0].0.to_owned());
    let Some((_, build)) = bindings.iter().find(|(name, _)| *name == chosen) else {
        let names: Vec<_> = bindings.iter().map(|(name, _)| *name).collect();
        exit(2, &format!("KPURGATORY_BINDING={chosen} is none of this test's bindings: {}", names.join(", ")));
    };
    let Ok(root) = env::var("KPURGATORY_VECTORS") else {
        exit(2, "KPURGATORY_VECTORS is not set: point it at a vector tree (generate one with `kpurgatory vectors DIR`)")
    };
    let root = PathBuf::from(root);
    let index: Json = fs::read_to_string(root.join("index.json"))
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| exit(2, &format!("{}: {e}", root.join("index.json").display())));
    if index["format"] != "kpurgatory-vectors" || index["version"] != 1 {
        exit(2, "index.json is not a kpurgatory-vectors tree of version 1");
    }
    let binding: Arc<dyn Binding> = Arc::from(build().unwrap_or_else(|e| exit(3, &format!("binding {chosen}: {e}"))));
    let out =
        env::var_os("KPURGATORY_VECTORS_OUT").map(PathBuf::from).unwrap_or_else(|| Path::new(tmp).join("kpurgatory"));
    let verdicts = Arc::new(Mutex::new(Vec::new()));
    let mut trials = Vec::new();
    for case in index["cases"].as_array().into_iter().flatten() {
        let path = case["path"].as_str().unwrap_or_default().to_owned();
        // the index is input: a path stays inside the tree, and reaches the terminal escaped
        let inside = !path.split('/').any(|part| part.is_empty() || part == "..");
        let name = path.trim_end_matches(".jsonl").escape_debug().to_string();
        let skip = skip_reason(binding.as_ref(), case);
        let (binding, verdicts, file, id, out) =
            (binding.clone(), verdicts.clone(), root.join(&path), case["id"].clone(), out.clone());
        trials.push(Trial::ignorable_test(name, move || {
            let outcome = match skip {
                _ if !inside => Outcome::Fail(Failure {
                    seq: None,
                    message: format!("case path {path:?} leaves the tree"),
                    observed: None,
                }),
                Some(reason) => Outcome::Skip(reason),
                None => run_case(binding.as_ref(), &file, id.as_str().unwrap_or("case"), &out),
            };
            let (verdict, reason, step, observed, completion) = match outcome {
                Outcome::Pass => ("pass", None, None, None, Ok(Completion::Completed)),
                Outcome::Skip(reason) => {
                    ("skip", Some(reason.clone()), None, None, Ok(Completion::ignored_with(reason)))
                }
                Outcome::Fail(f) => ("fail", Some(f.message.clone()), f.seq, f.observed, Err(Failed::from(f.message))),
            };
            verdicts.lock().unwrap().push(Verdict { path, verdict, reason, step, observed });
            completion
        }));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    let info = binding.info();
    if info.level == Level::Contract {
        eprintln!("note: {PURGATORY_CONTRACT}");
    }
    if let Some(file) = env::var_os("KPURGATORY_VECTORS_RESULTS") {
        let mut verdicts = std::mem::take(&mut *verdicts.lock().unwrap());
        verdicts.sort_by(|a, b| a.path.cmp(&b.path));
        let cases: Vec<Json> = verdicts
            .into_iter()
            .map(|v| json!({"path": v.path, "verdict": v.verdict, "reason": v.reason, "step": v.step, "observed": v.observed}))
            .collect();
        let results = json!({"format": "kpurgatory-vector-results", "version": 1, "driver": "rust",
            "implementation": info.implementation, "level": info.level.name(), "declarations": info.declarations,
            "cases": cases});
        if let Err(e) = fs::write(&file, results.to_string() + "\n") {
            exit(3, &format!("cannot write KPURGATORY_VECTORS_RESULTS {}: {e}", Path::new(&file).display()));
        }
    }
    conclusion.exit();
}

fn exit(code: i32, message: &str) -> ! {
    eprintln!("kpurgatory driver: {message}");
    std::process::exit(code)
}

/// Why the binding cannot run a case of the index (specs/vectors.md: skipped cases are counted, with a reason).
fn skip_reason(binding: &dyn Binding, case: &Json) -> Option<String> {
    let info = binding.info();
    let profile = case["profile"].as_str().unwrap_or_default();
    if !info.profiles.iter().any(|p| p == profile) {
        return Some(format!("profile {profile} is not implemented"));
    }
    if info.level == Level::Contract && profile == "purgatory" {
        return Some(PURGATORY_CONTRACT.into());
    }
    let names = |field: &str| case[field].as_array().into_iter().flatten().filter_map(Json::as_str).map(str::to_owned);
    let unsupported: Vec<_> = names("commands").filter(|c| info.unsupported_commands.contains(c)).collect();
    if !unsupported.is_empty() {
        return Some(format!("uses unsupported commands: {}", unsupported.join(", ")));
    }
    // Read-outs are not judged at the contract level, so a case needing one still runs there, without it.
    let missing: Vec<_> = names("features").filter(|f| !info.features.contains(f)).collect();
    if info.level == Level::Exact && !missing.is_empty() {
        return Some(format!("needs read-outs: {}", missing.join(", ")));
    }
    let declared = info.declarations.get("kafka_version").unwrap_or(&Json::Null);
    if case["kafka_version"] != *declared {
        let release = |v: &Json| v.as_str().map_or("current Kafka".to_owned(), |r| format!("Kafka {r}"));
        return Some(format!(
            "pinned to {}; the binding declares {}",
            release(&case["kafka_version"]),
            release(declared)
        ));
    }
    match Params::parse(&case["params"]) {
        Ok(params) => binding.rejects(&params),
        Err(e) => Some(e),
    }
}

struct Failure {
    seq: Option<i64>,
    message: String,
    observed: Option<String>,
}

enum Outcome {
    Pass,
    Fail(Failure),
    Skip(String),
}

fn run_case(binding: &dyn Binding, file: &Path, id: &str, out: &Path) -> Outcome {
    let broken = |message: String| {
        Outcome::Fail(Failure { seq: None, message: format!("{}: {message}", file.display()), observed: None })
    };
    let lines: Vec<Json> = match fs::read_to_string(file) {
        Ok(text) => match text.lines().map(serde_json::from_str).collect() {
            Ok(lines) => lines,
            Err(e) => return broken(format!("not JSON Lines: {e}")),
        },
        Err(e) => return broken(e.to_string()),
    };
    let Some(header) = lines.first().map(|line| &line["header"]).filter(|h| h.is_object()) else {
        return broken("the first line is not a trace header".into());
    };
    let profile = header["profile"].as_str().unwrap_or_default();
    let info = binding.info();
    let mut system = match binding.start(profile, &header["params"]) {
        Ok(system) => system,
        Err(e) => return broken(format!("init failed: {e}")),
    };
    let mut tracker = (info.level == Level::Contract)
        .then(|| Tracker::new(&info.declarations, header["params"]["start_ms"].as_i64().unwrap_or(0)));
    let mut answers: Vec<Option<Json>> = Vec::new();
    for step in &lines[1..] {
        let cmd = step["cmd"].as_str().unwrap_or_default();
        if tracker.is_some() && READ_OUTS.contains(&cmd) {
            answers.push(None);
            continue;
        }
        let problem = match system.call(cmd, &step["args"]) {
            Ok(observed) => {
                answers.push(Some(observed.to_json()));
                match tracker.as_mut() {
                    None => exact_difference(step, &observed),
                    Some(tracker) => match tracker.observe(step, &observed) {
                        Judged::Ok => None,
                        Judged::Violated(problem) => Some(problem),
                        Judged::Undefined => return Outcome::Pass,
                    },
                }
            }
            Err(Refusal::Failed(failure)) => {
                answers.push(Some(json!({ "failure": failure })));
                Some(format!("the implementation failed to answer: {failure}"))
            }
            Err(Refusal::Unrunnable(reason)) => return Outcome::Skip(format!("step {}: {reason}", step["seq"])),
        };
        if let Some(problem) = problem {
            let seq = step["seq"].as_i64();
            let observed_file = write_observed(&lines, &answers, info, out, id);
            let mut expected = json!({"result": step["result"], "events": step["events"]});
            if let Some(error) = step.get("error") {
                expected["error"] = error.clone();
            }
            let mut message = format!(
                "{}\n  step {} ({cmd} {}): {problem}\n  expected (model, {} level): {expected}\n  observed: {}",
                file.display(),
                seq.unwrap_or(0),
                step["args"],
                info.level.name(),
                answers.last().cloned().flatten().unwrap_or_default()
            );
            match &observed_file {
                Ok(path) => {
                    message += &format!(
                        "\n  observed run: {path}\n  replay with its HTML view: kpurgatory replay {path} --level {}",
                        info.level.name()
                    )
                }
                Err(e) => message += &format!("\n  (could not write the observed run: {e})"),
            }
            return Outcome::Fail(Failure { seq, message, observed: observed_file.ok() });
        }
    }
    Outcome::Pass
}

/// The case up to the failing step, each step with what the implementation answered (`system`), the header naming
/// the implementation and its declarations: a trace `kpurgatory replay` judges on its own.
fn write_observed(
    lines: &[Json],
    answers: &[Option<Json>],
    info: &Info,
    out: &Path,
    id: &str,
) -> Result<String, String> {
    let mut text = String::new();
    let mut header = lines[0].clone();
    header["header"]["implementation"] = json!(info.implementation);
    header["header"]["declarations"] = Json::Object(info.declarations.clone());
    text += &(header.to_string() + "\n");
    for (step, answer) in lines[1..].iter().zip(answers) {
        let mut step = step.clone();
        if let Some(answer) = answer {
            step["system"] = answer.clone();
        }
        text += &(step.to_string() + "\n");
    }
    fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let file = out.join(format!("{}.observed.jsonl", id.replace(['/', '\\'], "_")));
    fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(file.display().to_string())
}

/// The exact level: result and error equal; events equal group by group, in any order within a group.
fn exact_difference(step: &Json, observed: &Observed) -> Option<String> {
    let error = step.get("error").and_then(Json::as_str);
    if observed.error.as_deref() != error {
        return Some(format!("error {:?}, expected {:?}", observed.error, error));
    }
    let cmd = step["cmd"].as_str().unwrap_or_default();
    if comparable(cmd, &observed.result) != comparable(cmd, &step["result"]) {
        return Some(format!("result {}, expected {}", observed.result, step["result"]));
    }
    let expected = step["events"].as_array().cloned().unwrap_or_default();
    if observed.events.len() != expected.len() {
        return Some(format!("{} events, expected {}", observed.events.len(), expected.len()));
    }
    let mut groups: Vec<usize> = step["expect"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Json::as_u64)
        .map(|n| n as usize)
        .collect();
    // events no group covers form one more group: none goes unchecked
    groups.push(expected.len().saturating_sub(groups.iter().sum()));
    let mut start = 0;
    for (index, size) in groups.into_iter().enumerate() {
        let sorted = |events: &[Json]| {
            let mut texts: Vec<String> = events.iter().map(Json::to_string).collect();
            texts.sort();
            texts
        };
        let end = (start + size).min(expected.len());
        if sorted(&observed.events[start..end]) != sorted(&expected[start..end]) {
            return Some(format!("event group {index} (events {start}..{end}) differs"));
        }
        start = end;
    }
    None
}

/// A result as the exact level compares it: `shutdown`'s ids and a wheel bucket's entries in any order.
fn comparable(cmd: &str, result: &Json) -> Json {
    // get_mut, not indexing: an adapter's answer may have any shape
    fn list<'a>(value: &'a mut Json, name: &str) -> impl Iterator<Item = &'a mut Vec<Json>> {
        value.get_mut(name).and_then(Json::as_array_mut).into_iter()
    }
    let mut result = json!({"result": result});
    let lists: Vec<&mut Vec<Json>> = match cmd {
        "shutdown" => list(&mut result, "result").collect(),
        "wheel" => list(&mut result["result"], "levels")
            .flatten()
            .flat_map(|level| list(level, "buckets").flatten())
            .flat_map(|bucket| list(bucket, "entries"))
            .collect(),
        _ => Vec::new(),
    };
    for items in lists {
        items.sort_by_key(Json::to_string);
    }
    result["result"].take()
}

enum Judged {
    Ok,
    Violated(String),
    /// An input the declarations leave undefined: nothing after it is judged.
    Undefined,
}

/// The contract level of the timer profile (model/contract.py): each pending task's firing window, and what left
/// the timer since the last advance (a lazy size may still count it).
struct Tracker {
    firing: String,
    lazy_size: bool,
    max_deadline_ms: i64,
    beyond_max_deadline: String,
    negative_delays: String,
    now: i64,
    pending: HashMap<String, (i64, i64)>,
    departed: Vec<String>,
}

impl Tracker {
    fn new(declarations: &Map<String, Json>, start_ms: i64) -> Tracker {
        let text =
            |name: &str, default: &str| declarations.get(name).and_then(Json::as_str).unwrap_or(default).to_owned();
        Tracker {
            firing: text("firing", "kafka"),
            lazy_size: declarations.get("lazy_size").and_then(Json::as_bool).unwrap_or(false),
            max_deadline_ms: declarations.get("max_deadline_ms").and_then(Json::as_i64).unwrap_or(i64::MAX),
            beyond_max_deadline: text("beyond_max_deadline", "rejected"),
            negative_delays: text("negative_delays", "run_at_once"),
            now: start_ms,
            pending: HashMap::new(),
            departed: Vec::new(),
        }
    }

    fn unschedule(&mut self, task: &str) -> Option<(i64, i64)> {
        let window = self.pending.remove(task);
        if window.is_some() {
            self.departed.push(task.to_owned());
        }
        window
    }

    fn observe(&mut self, step: &Json, observed: &Observed) -> Judged {
        let args = &step["args"];
        let rejected = observed.error.as_deref() == Some("delay_out_of_range");
        match step["cmd"].as_str().unwrap_or_default() {
            "timer_add" => {
                let delay = args["delay_ms"].as_i64().unwrap_or(0);
                let deadline = self.now.checked_add(delay);
                let treatment = match deadline {
                    Some(d) if d <= self.max_deadline_ms && (delay >= 0 || self.negative_delays == "run_at_once") => {
                        "accepted"
                    }
                    Some(d) if d <= self.max_deadline_ms => self.negative_delays.as_str(),
                    _ => self.beyond_max_deadline.as_str(),
                };
                let what = format!("timer_add with delay_ms={delay} at {} (deadline {deadline:?})", self.now);
                match (treatment, rejected) {
                    ("undefined", _) => return Judged::Undefined,
                    ("accepted", true) => {
                        return Judged::Violated(format!(
                            "domain: {what} is inside the declared domain but was rejected"
                        ))
                    }
                    ("accepted", false) => {}
                    (_, false) => {
                        return Judged::Violated(format!(
                        "domain: {what} is outside the declared domain and must be rejected with delay_out_of_range"
                    ))
                    }
                    (_, true) if !observed.events.is_empty() => {
                        return Judged::Violated("domain: a rejected timer_add caused events".into())
                    }
                    (_, true) => return Judged::Ok,
                }
                let Some([lo, hi]) = self.window(step) else {
                    return Judged::Violated(format!("the case gives no {} window for this timer_add", self.firing));
                };
                let task = args["task"].as_str().unwrap_or_default();
                self.unschedule(task);
                self.pending.insert(task.to_owned(), (lo, hi));
            }
            "timer_cancel" => {
                self.unschedule(args["task"].as_str().unwrap_or_default());
            }
            "advance" => self.now = args["to_ms"].as_i64().unwrap_or(self.now),
            _ => {}
        }
        if let Some(error) = observed.error.as_deref().filter(|_| step["cmd"] != "timer_add") {
            return Judged::Violated(format!("{} answered the error {error:?}", step["cmd"]));
        }
        for event in &observed.events {
            let task = event["task"].as_str().unwrap_or_default();
            if event["event"] != "run" {
                return Judged::Violated(format!("event {event} is not a timer-profile event"));
            }
            match self.unschedule(task) {
                None => return Judged::Violated(format!("exactly_once: task {task:?} ran but was not pending")),
                Some((lo, _)) if self.now < lo => {
                    return Judged::Violated(format!(
                        "on_time: task {task:?} ran at {}, before its window opens at {lo} ({} firing)",
                        self.now, self.firing
                    ))
                }
                Some(_) => {}
            }
        }
        match step["cmd"].as_str().unwrap_or_default() {
            "advance" => {
                self.departed.clear();
                let mut late: Vec<_> = self
                    .pending
                    .iter()
                    .filter(|(_, w)| w.1 <= self.now)
                    .map(|(t, w)| format!("{t:?} (due by {})", w.1))
                    .collect();
                if !late.is_empty() {
                    late.sort();
                    return Judged::Violated(format!(
                        "on_time: still pending after advance to {} ({} firing): {}",
                        self.now,
                        self.firing,
                        late.join(", ")
                    ));
                }
            }
            "size" => {
                let (low, high) = (self.pending.len() as u64, (self.pending.len() + self.lazy().len()) as u64);
                if !observed.result.as_u64().is_some_and(|size| low <= size && size <= high) {
                    return Judged::Violated(format!(
                        "counters: size {}, expected {}",
                        observed.result,
                        if low == high { low.to_string() } else { format!("between {low} and {high} (lazy_size)") }
                    ));
                }
            }
            "shutdown" => {
                let reported: Vec<String> = observed
                    .result
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Json::as_str)
                    .map(str::to_owned)
                    .collect();
                let distinct: BTreeSet<&String> = reported.iter().collect();
                let pending: BTreeSet<&String> = self.pending.keys().collect();
                let allowed: BTreeSet<&String> = pending.iter().copied().chain(self.lazy()).collect();
                if distinct.len() != reported.len() || !pending.is_subset(&distinct) || !distinct.is_subset(&allowed) {
                    return Judged::Violated(format!(
                        "counters: shutdown returned {}, expected the pending tasks {pending:?}",
                        observed.result
                    ));
                }
            }
            _ => {}
        }
        Judged::Ok
    }

    /// The entries a lazy size may still count.
    fn lazy(&self) -> &[String] {
        if self.lazy_size {
            &self.departed
        } else {
            &[]
        }
    }

    fn window(&self, step: &Json) -> Option<[i64; 2]> {
        let window = step["expect"]["windows"][self.firing.as_str()].as_array()?;
        Some([window.first()?.as_i64()?, window.get(1)?.as_i64()?])
    }
}
