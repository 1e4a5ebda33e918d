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
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::{env, fs, io};

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
    /// It failed to answer (specs/protocol.md §6), with its text (a panic's message): the case fails.
    Failed(String),
    /// It cannot answer in bounded time by its design: the case is skipped with this reason.
    Unrunnable(String),
    /// The call did not return within the call timeout (specs/vectors.md §4): the case fails.
    Hung(String),
    /// The call took its process down (a stack overflow, an abort), with the process's last words: the case fails.
    Crashed(String),
}

impl Refusal {
    /// The refusal as a step's failure text: `hung: …`, `crashed: …`, or what the system said.
    fn text(&self) -> String {
        match self {
            Refusal::Failed(text) | Refusal::Unrunnable(text) => text.clone(),
            Refusal::Hung(text) => format!("hung: {text}"),
            Refusal::Crashed(text) => format!("crashed: {text}"),
        }
    }
}

/// How long a call may take: `$KPURGATORY_VECTORS_CALL_TIMEOUT_MS`, 10 s by default.
fn call_timeout() -> Duration {
    let ms = env::var("KPURGATORY_VECTORS_CALL_TIMEOUT_MS").ok().and_then(|ms| ms.parse().ok()).filter(|&ms| ms > 0);
    Duration::from_millis(ms.unwrap_or(10_000))
}

/// How a child serving an in-process binding says that a call is [`Refusal::Unrunnable`] (the protocol has only
/// failures).
const UNRUNNABLE: &str = "unrunnable: ";
/// Set in the child process that serves an in-process binding (see [`main`]).
const CHILD: &str = "KPURGATORY_VECTORS_CHILD";

/// One run of an implementation.
pub trait System {
    fn call(&mut self, cmd: &str, args: &Json) -> Result<Observed, Refusal>;
}

pub trait Binding: Send + Sync {
    fn info(&self) -> &Info;
    /// Whether its implementation runs in a process of its own and bounds its calls itself (the stdio binding): then
    /// the test's process drives it; any other binding is served from a child process (see [`main`]).
    fn out_of_process(&self) -> bool {
        false
    }
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

/// Builds a binding; `Err` says why it cannot be had (its adapter would not start, a variable is missing).
pub type BuildBinding = fn() -> Result<Box<dyn Binding>, String>;

/// One line of a results file (the cross-implementation page reads these).
struct Verdict {
    path: String,
    verdict: &'static str,
    reason: Option<String>,
    step: Option<i64>,
    observed: Option<String>,
    finding: Option<String>,
}

/// The test binary's `main`: runs every case of `$KPURGATORY_VECTORS` against the binding `$KPURGATORY_BINDING`
/// names (the first one when unset). Each binding is built only when chosen (the stdio one starts its adapter).
/// Observed runs of failed cases go to `$KPURGATORY_VECTORS_OUT`, else to `<tmp>/kpurgatory` (pass the test's
/// `env!("CARGO_TARGET_TMPDIR")`).
///
/// An in-process binding is served from a child process, so that a call overflowing its thread's stack (which
/// aborts the process) or never returning fails only its case: the test binary runs itself again with
/// `KPURGATORY_VECTORS_CHILD` set, and that child serves the binding on its stdin and stdout as a stdio adapter
/// would. The test's process drives it as it drives an adapter, and keeps the judging.
pub fn main(tmp: &str, bindings: &[(&str, BuildBinding)]) {
    let chosen = env::var("KPURGATORY_BINDING").unwrap_or_else(|_| bindings[0].0.to_owned());
    let Some((_, build)) = bindings.iter().find(|(name, _)| *name == chosen) else {
        let names: Vec<_> = bindings.iter().map(|(name, _)| *name).collect();
        exit(2, &format!("KPURGATORY_BINDING={chosen} is none of this test's bindings: {}", names.join(", ")));
    };
    let binding: Arc<dyn Binding> = Arc::from(build().unwrap_or_else(|e| exit(3, &format!("binding {chosen}: {e}"))));
    if env::var_os(CHILD).is_some() {
        serve(binding.as_ref());
        return;
    }
    let args = Arguments::from_args();
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
    let families: Arc<Vec<(String, Vec<String>)>> = Arc::new(
        index["families"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|pair| {
                let words = pair[1].as_array()?.iter().filter_map(Json::as_str).map(str::to_owned).collect();
                Some((pair[0].as_str()?.to_owned(), words))
            })
            .collect(),
    );
    let runner: Arc<dyn Binding> = if binding.out_of_process() {
        binding.clone()
    } else {
        Arc::from(stdio::child(binding.info().clone(), CHILD, chosen).unwrap_or_else(|e| exit(3, &e)))
    };
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
        let (runner, verdicts, file, id, out, families) =
            (runner.clone(), verdicts.clone(), root.join(&path), case["id"].clone(), out.clone(), families.clone());
        trials.push(Trial::ignorable_test(name, move || {
            let outcome = match skip {
                _ if !inside => Failure::broken(format!("case path {path:?} leaves the tree")),
                Some(reason) => Outcome::Skip(reason),
                None => run_case(runner.as_ref(), &file, id.as_str().unwrap_or("case"), &out, &families),
            };
            let (verdict, reason, step, observed, finding, completion) = match outcome {
                Outcome::Pass(None) => ("pass", None, None, None, None, Ok(Completion::Completed)),
                Outcome::Pass(Some((finding, reason))) => {
                    println!("{path}: {reason}");
                    ("pass", Some(reason), None, None, Some(finding), Ok(Completion::Completed))
                }
                Outcome::Skip(reason) => {
                    ("skip", Some(reason.clone()), None, None, None, Ok(Completion::ignored_with(reason)))
                }
                Outcome::Fail(f) => {
                    ("fail", Some(f.reason()), f.seq, f.observed, f.finding, Err(Failed::from(f.message)))
                }
            };
            verdicts.lock().unwrap().push(Verdict { path, verdict, reason, step, observed, finding });
            completion
        }));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    let info = binding.info();
    let mut verdicts = std::mem::take(&mut *verdicts.lock().unwrap());
    if let Some(file) = env::var_os("KPURGATORY_VECTORS_RESULTS") {
        verdicts.sort_by(|a, b| a.path.cmp(&b.path));
        let cases: Vec<Json> = verdicts
            .iter()
            .map(|v| {
                let mut case = json!({"path": v.path, "verdict": v.verdict, "reason": v.reason, "step": v.step,
                    "observed": v.observed});
                if let Some(finding) = &v.finding {
                    case["finding"] = json!(finding);
                }
                case
            })
            .collect();
        let results = json!({"format": "kpurgatory-vector-results", "version": 1, "driver": "rust",
            "implementation": info.implementation, "level": info.level.name(), "declarations": info.declarations,
            "cases": cases});
        if let Err(e) = fs::write(&file, results.to_string() + "\n") {
            exit(3, &format!("cannot write KPURGATORY_VECTORS_RESULTS {}: {e}", Path::new(&file).display()));
        }
    }
    if !verdicts.iter().any(|v| v.verdict != "skip") {
        exit(101, &no_case_ran(&verdicts, &info.declarations, &index["kafka_version"]));
    }
    conclusion.exit();
}

/// The failure of a run that checked nothing (specs/vectors.md §3): the skips by reason, and the tree the binding
/// needs when it follows another Kafka release than the tree.
fn no_case_ran(verdicts: &[Verdict], declarations: &Map<String, Json>, tree: &Json) -> String {
    let mut skips: BTreeMap<&str, usize> = BTreeMap::new();
    for verdict in verdicts {
        *skips.entry(verdict.reason.as_deref().unwrap_or_default()).or_default() += 1;
    }
    let mut message = "no case ran: a run that checks nothing does not pass".to_owned();
    for (reason, n) in skips {
        message += &format!("\n  {n} skipped: {reason}");
    }
    let declared = declarations.get("kafka_version").unwrap_or(&Json::Null);
    if declared != tree {
        let option = declared.as_str().map_or(String::new(), |v| format!(" --kafka-version {v}"));
        message += &format!(
            "\n  the tree is made for Kafka {tree}, the binding declares {declared}: make one for it with \
             `kpurgatory vectors DIR{option}`"
        );
    }
    message
}

/// The child's side (see [`main`]): serves the binding on stdin and stdout as a stdio adapter (specs/protocol.md),
/// until its input ends. A panic is a failure to answer, with its message; an unrunnable call a failure that says so.
fn serve(binding: &dyn Binding) {
    let mut system: Option<Box<dyn System>> = None;
    let mut stdout = io::stdout();
    for line in io::stdin().lock().lines().map_while(Result::ok) {
        let request: Json = serde_json::from_str(&line).unwrap_or_default();
        let (cmd, args) = (request["cmd"].as_str().unwrap_or_default(), &request["args"]);
        let answer = catch_unwind(AssertUnwindSafe(|| match cmd {
            "hello" => {
                let info = binding.info();
                Ok(json!({"result": {"protocol_version": 1, "implementation": info.implementation,
                    "profiles": info.profiles, "features": info.features, "declarations": info.declarations,
                    "unsupported_commands": info.unsupported_commands}, "events": []}))
            }
            "init" => {
                system = None;
                system = Some(binding.start(args["profile"].as_str().unwrap_or_default(), &args["params"])?);
                Ok(json!({"result": null, "events": []}))
            }
            _ => match system.as_mut().map(|system| system.call(cmd, args)) {
                None => Err(format!("{cmd} before init")),
                Some(Ok(observed)) => Ok(observed.to_json()),
                Some(Err(Refusal::Unrunnable(reason))) => Err(format!("{UNRUNNABLE}{reason}")),
                Some(Err(refusal)) => Err(refusal.text()),
            },
        }))
        .unwrap_or_else(|panic| Err(format!("{cmd} panicked: {}", panicked(&panic))));
        let mut response = answer.unwrap_or_else(|failure| json!({ "failure": failure }));
        response["seq"] = request["seq"].clone();
        if writeln!(stdout, "{response}").and_then(|_| stdout.flush()).is_err() {
            return;
        }
    }
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
    /// what was wrong (the results' reason)
    problem: String,
    /// the whole report: the case, the step, expected and observed, the observed run
    message: String,
    observed: Option<String>,
    finding: Option<String>,
}

impl Failure {
    fn broken(message: String) -> Outcome {
        Outcome::Fail(Failure { seq: None, problem: message.clone(), message, observed: None, finding: None })
    }

    fn reason(&self) -> String {
        self.problem.clone()
    }
}

enum Outcome {
    /// passed; or passed as Kafka does at one of its findings: the finding's name and the reason saying so
    Pass(Option<(String, String)>),
    Fail(Failure),
    Skip(String),
}

fn run_case(binding: &dyn Binding, file: &Path, id: &str, out: &Path, families: &[(String, Vec<String>)]) -> Outcome {
    let broken = |message: String| Failure::broken(format!("{}: {message}", file.display()));
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
        .then(|| Tracker::new(&info.declarations, profile, header["params"]["start_ms"].as_i64().unwrap_or(0)));
    let mut answers: Vec<Option<Json>> = Vec::new();
    for step in &lines[1..] {
        let cmd = step["cmd"].as_str().unwrap_or_default();
        if tracker.is_some() && READ_OUTS.contains(&cmd) {
            answers.push(None);
            continue;
        }
        if tracker.as_mut().is_some_and(|tracker| tracker.undefined(step)) {
            return Outcome::Pass(None);
        }
        let call = system.call(cmd, &step["args"]);
        let problem = match &call {
            Ok(observed) => {
                answers.push(Some(observed.to_json()));
                match tracker.as_mut() {
                    None => exact_difference(step, observed),
                    Some(tracker) => tracker.observe(step, observed),
                }
            }
            Err(Refusal::Unrunnable(reason)) => return Outcome::Skip(format!("step {}: {reason}", step["seq"])),
            Err(refusal) => {
                answers.push(Some(json!({ "failure": refusal.text() })));
                Some(format!("the implementation failed to answer: {}", refusal.text()))
            }
        };
        let Some(mut problem) = problem else { continue };
        let mut finding = None;
        if let Some(kafka) = step["expect"].get("kafka").filter(|kafka| as_kafka_does(kafka, &call, families)) {
            // Kafka's own timer does this here: a binding following Kafka passes, any other fails by that name
            let name = kafka["finding"].as_str().unwrap_or_default().to_owned();
            problem = format!("as Kafka does: {name}: {problem}");
            if info.declarations.get("kafka_version").is_some_and(|v| !v.is_null()) {
                return Outcome::Pass(Some((name, problem)));
            }
            finding = Some(name);
        }
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
        return Outcome::Fail(Failure { seq, problem, message, observed: observed_file.ok(), finding });
    }
    Outcome::Pass(None)
}

/// Whether what the binding did at a step of one of Kafka's findings (its answer, or why it gave none) is what
/// Kafka's own timer does there (`expect.kafka`, specs/vectors.md §5.4). A failure's text is classified by the
/// index's families, the first that matches.
fn as_kafka_does(kafka: &Json, call: &Result<Observed, Refusal>, families: &[(String, Vec<String>)]) -> bool {
    let flag = |name: &str| kafka[name].as_bool().unwrap_or(false);
    let runs = |id: &Json| kafka["runs"].as_array().is_some_and(|runs| runs.contains(id));
    match call {
        _ if flag("anything") => true,
        Ok(observed) => {
            flag("answers") && observed.error.is_none()
                || observed
                    .events
                    .iter()
                    .any(|e| e["event"] == "run" && runs(&e["task"]) || e["event"] == "expire" && runs(&e["op"]))
        }
        Err(Refusal::Hung(_)) => flag("hangs"),
        Err(refusal) => {
            let text = refusal.text().to_lowercase();
            let family = families.iter().find(|(_, words)| words.iter().any(|word| text.contains(word.as_str())));
            family.is_some_and(|(name, _)| kafka["fails"].as_array().is_some_and(|fails| fails.contains(&json!(name))))
                || flag("crashes") && matches!(refusal, Refusal::Crashed(_))
        }
    }
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

/// The contract level (specs/vectors.md §5.2, §5.3; model/contract.py): what is pending in the timer with each
/// entry's firing window, what left it since the last advance (a lazy size may still count it), and in a purgatory
/// each op's condition and the watch lists' entries. A problem names the property it breaks.
struct Tracker {
    firing: String,
    lazy_size: bool,
    runs_due_on_update: bool,
    max_deadline_ms: i64,
    beyond_max_deadline: String,
    negative_delays: String,
    purgatory: bool,
    now: i64,
    /// task or op -> the firing window [lo, hi] of its last scheduling; hi None: never late (see `schedule`)
    pending: HashMap<String, (i64, Option<i64>)>,
    departed: Vec<String>,
    ops: HashMap<String, Op>,
    /// key -> op -> entries of ops not completed
    live: HashMap<String, HashMap<String, i64>>,
    /// key -> op -> entries of completed ops a purgatory may still list
    stale: HashMap<String, HashMap<String, i64>>,
}

struct Op {
    delay: i64,
    /// the first watch carried a ready_on
    ready_on: bool,
    /// the last set_ready, if any
    ready: Option<bool>,
    completed: bool,
}

impl Op {
    /// Whether its condition may hold, so that a try or a check may complete it.
    fn may_hold(&self) -> bool {
        self.ready.unwrap_or(self.ready_on)
    }
}

/// The commands that may complete an op by each route.
fn route(via: &str) -> &'static [&'static str] {
    match via {
        "try" => &["watch", "try"],
        "check" => &["check"],
        "force" => &["force"],
        "expire" => &["advance", "watch"],
        _ => &[],
    }
}

type Judged = Result<(), String>;

impl Tracker {
    fn new(declarations: &Map<String, Json>, profile: &str, start_ms: i64) -> Tracker {
        let text =
            |name: &str, default: &str| declarations.get(name).and_then(Json::as_str).unwrap_or(default).to_owned();
        let flag = |name: &str| declarations.get(name).and_then(Json::as_bool).unwrap_or(false);
        Tracker {
            firing: text("firing", "kafka"),
            lazy_size: flag("lazy_size"),
            runs_due_on_update: flag("runs_due_on_update"),
            max_deadline_ms: declarations.get("max_deadline_ms").and_then(Json::as_i64).unwrap_or(i64::MAX),
            beyond_max_deadline: text("beyond_max_deadline", "rejected"),
            negative_delays: text("negative_delays", "run_at_once"),
            purgatory: profile == "purgatory",
            now: start_ms,
            pending: HashMap::new(),
            departed: Vec::new(),
            ops: HashMap::new(),
            live: HashMap::new(),
            stale: HashMap::new(),
        }
    }

    /// An input the declarations leave undefined: it is not sent, and the judging of the case ends before it.
    fn undefined(&mut self, step: &Json) -> bool {
        match step["cmd"].as_str().unwrap_or_default() {
            "timer_add" => self.treatment(step, step["args"]["delay_ms"].as_i64().unwrap_or(0)) == "undefined",
            "watch" if step["args"]["keys"].as_array().is_some_and(|keys| !keys.is_empty()) => {
                let delay = self.op(step).delay;
                self.treatment(step, delay) == "undefined"
            }
            _ => false,
        }
    }

    /// The op the step names, created at its first sight (a watch's delay_ms and ready_on are its own).
    fn op(&mut self, step: &Json) -> &mut Op {
        let args = &step["args"];
        self.ops.entry(args["op"].as_str().unwrap_or_default().to_owned()).or_insert_with(|| Op {
            delay: args["delay_ms"].as_i64().unwrap_or(0),
            ready_on: !args["ready_on"].is_null(),
            ready: None,
            completed: false,
        })
    }

    /// How the declarations treat scheduling `delay` at this step: "accepted", "rejected" or "undefined". The
    /// deadline is the step's `expect.deadline_ms` (null: beyond 2^63-1), computed in a tree that lacks it.
    fn treatment(&self, step: &Json, delay: i64) -> &str {
        let deadline = match step["expect"].get("deadline_ms") {
            Some(deadline) => deadline.as_i64(),
            None => self.now.checked_add(delay),
        };
        match deadline {
            Some(d) if d <= self.max_deadline_ms && (delay >= 0 || self.negative_delays == "run_at_once") => "accepted",
            Some(d) if d <= self.max_deadline_ms => &self.negative_delays,
            _ => &self.beyond_max_deadline,
        }
    }

    /// Judges a scheduling's answer against its treatment: `Ok(true)` when it was accepted.
    fn domain(&self, step: &Json, delay: i64, observed: &Observed) -> Result<bool, String> {
        if self.treatment(step, delay) != "rejected" {
            return Ok(true);
        }
        if observed.error.as_deref() != Some("delay_out_of_range") || !observed.events.is_empty() {
            return Err(format!(
                "domain: {} with delay_ms={delay} at {} is outside the declared domain: expected the error \
                 delay_out_of_range and no events, observed {:?} and {} events",
                step["cmd"],
                self.now,
                observed.error,
                observed.events.len()
            ));
        }
        Ok(false)
    }

    fn observe(&mut self, step: &Json, observed: &Observed) -> Option<String> {
        let judged = if self.purgatory { self.purgatory_step(step, observed) } else { self.timer_step(step, observed) };
        judged.and_then(|()| self.queries(step, observed)).err()
    }

    /// The rules every profile shares: lateness after an advance, the counters, shutdown.
    fn queries(&mut self, step: &Json, observed: &Observed) -> Judged {
        match step["cmd"].as_str().unwrap_or_default() {
            "advance" => {
                self.departed.clear();
                let mut late: Vec<_> = self
                    .pending
                    .iter()
                    .filter_map(|(id, &(_, hi))| {
                        hi.filter(|&hi| hi <= self.now).map(|hi| format!("{id:?} (due by {hi})"))
                    })
                    .collect();
                if !late.is_empty() {
                    late.sort();
                    return Err(format!(
                        "on_time: still pending after advance to {} ({} firing): {}",
                        self.now,
                        self.firing,
                        late.join(", ")
                    ));
                }
            }
            cmd @ ("size" | "delayed") => {
                let (low, high) = (self.pending.len() as u64, (self.pending.len() + self.lazy().len()) as u64);
                if !observed.result.as_u64().is_some_and(|size| low <= size && size <= high) {
                    return Err(format!(
                        "counters: {cmd} {}, expected {}",
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
                    return Err(format!(
                        "counters: shutdown returned {}, expected the pending ids {pending:?}",
                        observed.result
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn timer_step(&mut self, step: &Json, observed: &Observed) -> Judged {
        let (cmd, args) = (step["cmd"].as_str().unwrap_or_default(), &step["args"]);
        let task = args["task"].as_str().unwrap_or_default();
        // with runs_due_on_update, a cancel or re-add of a due task may run its old entry inside the call
        let mut due = false;
        match cmd {
            "timer_add" => {
                if !self.domain(step, args["delay_ms"].as_i64().unwrap_or(0), observed)? {
                    return Ok(());
                }
                due = self.due(task);
                self.schedule(task, step);
            }
            "timer_cancel" => {
                due = self.due(task);
                self.unschedule(task);
            }
            "advance" => self.now = args["to_ms"].as_i64().unwrap_or(self.now),
            _ => {}
        }
        if let Some(error) = &observed.error {
            return Err(format!("{cmd} answered the error {error:?}; the contract expects none here"));
        }
        for event in &observed.events {
            let ran = event["task"].as_str().unwrap_or_default();
            if event["event"] != "run" {
                return Err(format!("event {event} is not a timer-profile event"));
            }
            if due && ran == task {
                due = false; // the old entry's run
                continue;
            }
            match self.pending.get(ran).copied() {
                None => return Err(format!("exactly_once: task {ran:?} ran but was not pending")),
                Some((lo, _)) if self.now < lo => {
                    return Err(format!(
                        "on_time: task {ran:?} ran at {}, before its window opens at {lo} ({} firing)",
                        self.now, self.firing
                    ))
                }
                Some(_) => self.unschedule(ran),
            }
        }
        Ok(())
    }

    /// Whether the task is pending with its window open, when the binding may run it on an update.
    fn due(&self, task: &str) -> bool {
        self.runs_due_on_update && self.pending.get(task).is_some_and(|&(lo, _)| lo <= self.now)
    }

    /// Pending with the window of the step's scheduling (leaving any earlier one); a tree without windows on every
    /// watch gives a re-watch no window: never early, never late. A null hi is a window ending past 2^63-1, which no
    /// advance reaches (specs/vectors.md §2): never late, but still not early. It is not clamped to i64::MAX, as an
    /// entry due by exactly 2^63-1 is late after an advance to 2^63-1.
    fn schedule(&mut self, id: &str, step: &Json) {
        self.unschedule(id);
        let window = step["expect"]["windows"][self.firing.as_str()].as_array().and_then(|w| {
            let hi = w.get(1)?;
            Some((w.first()?.as_i64()?, if hi.is_null() { None } else { Some(hi.as_i64()?) }))
        });
        self.pending.insert(id.to_owned(), window.unwrap_or((i64::MIN, None)));
    }

    fn unschedule(&mut self, id: &str) {
        if self.pending.remove(id).is_some() {
            self.departed.push(id.to_owned());
        }
    }

    fn purgatory_step(&mut self, step: &Json, observed: &Observed) -> Judged {
        let (cmd, args) = (step["cmd"].as_str().unwrap_or_default(), &step["args"]);
        let (id, key) = (args["op"].as_str().unwrap_or_default(), args["key"].as_str().unwrap_or_default());
        if args.get("op").is_some() {
            self.op(step);
        }
        if cmd == "watch" {
            let keys: Vec<&str> = args["keys"].as_array().into_iter().flatten().filter_map(Json::as_str).collect();
            if keys.is_empty() {
                if observed.error.as_deref() != Some("empty_keys") || !observed.events.is_empty() {
                    return Err(format!(
                        "domain: a watch without keys must answer the error empty_keys and no events, observed {:?} \
                         and {} events",
                        observed.error,
                        observed.events.len()
                    ));
                }
                return Ok(());
            }
            if !self.domain(step, self.ops[id].delay, observed)? {
                return Ok(());
            }
            if observed.error.is_none() {
                let completed = self.ops[id].completed;
                for key in keys {
                    if !completed {
                        *self.live.entry(key.into()).or_default().entry(id.into()).or_default() += 1;
                    } else if step["expect"]["relist_completed"] == true {
                        *self.stale.entry(key.into()).or_default().entry(id.into()).or_default() += 1;
                    }
                }
                if !completed {
                    self.schedule(id, step);
                }
            }
        }
        if let Some(error) = &observed.error {
            return Err(format!("{cmd} answered the error {error:?}; the contract expects none here"));
        }
        let was_completed = self.ops.get(id).is_some_and(|op| op.completed);
        let listed = self.live.get(key).cloned().unwrap_or_default();
        match cmd {
            "set_ready" => self.op(step).ready = Some(args["ready"].as_bool().unwrap_or(true)),
            "cancel_key" => {
                let mut returned: HashMap<String, i64> = HashMap::new();
                for item in observed.result.as_array().into_iter().flatten() {
                    *returned.entry(item.as_str().map_or_else(|| item.to_string(), str::to_owned)).or_default() += 1;
                }
                let stale = self.stale.remove(key).unwrap_or_default();
                let count = |map: &HashMap<String, i64>, id: &str| map.get(id).copied().unwrap_or(0);
                if listed.iter().any(|(op, &n)| count(&returned, op) < n)
                    || returned.iter().any(|(op, &n)| n > count(&listed, op) + count(&stale, op))
                {
                    return Err(format!(
                        "watcher_cleanup: cancel_key({key:?}) returned {}; the key's entries are {listed:?}, plus \
                         possibly {stale:?} completed ones",
                        observed.result
                    ));
                }
                self.live.remove(key);
                for op in listed.keys() {
                    self.unschedule(op);
                }
            }
            "cancel" => self.unschedule(id),
            "advance" => self.now = args["to_ms"].as_i64().unwrap_or(self.now),
            "watched" => {
                let total = |lists: &HashMap<String, HashMap<String, i64>>| -> i64 {
                    lists.values().flat_map(HashMap::values).sum()
                };
                let (live, stale) = (total(&self.live), total(&self.stale));
                if !observed.result.as_i64().is_some_and(|n| live <= n && n <= live + stale) {
                    return Err(format!(
                        "watcher_cleanup: watched() = {}; expected between {live} live entries and {} (with \
                         completed entries not yet due for removal)",
                        observed.result,
                        live + stale
                    ));
                }
            }
            _ => {}
        }
        let completed = self.events(step, observed)?;
        let expect = |want: Json| {
            if observed.result == want {
                Ok(())
            } else {
                Err(format!("justified: {cmd} returned {}; the observations imply {want}", observed.result))
            }
        };
        match cmd {
            "watch" => expect(json!(completed.iter().any(|(op, via)| op == id && via == "try"))),
            "check" => {
                let here: Vec<&String> = completed.iter().filter(|(_, via)| via == "check").map(|(op, _)| op).collect();
                for candidate in listed.keys() {
                    if self.ops[candidate].ready == Some(true) && !here.contains(&candidate) {
                        return Err(format!(
                            "no_lost_wakeup: check({key:?}) did not complete {candidate:?}, whose condition holds and \
                             which is watched on that key"
                        ));
                    }
                }
                // the walk removes every completed entry it visits: an op listed n times keeps n - 1 of them
                let kept: HashMap<String, i64> = here
                    .iter()
                    .filter_map(|op| listed.get(*op).filter(|&&n| n > 1).map(|n| ((*op).clone(), n - 1)))
                    .collect();
                self.stale.remove(key);
                if !kept.is_empty() {
                    self.stale.insert(key.to_owned(), kept);
                }
                expect(json!(here.len()))
            }
            "force" => expect(json!(!was_completed)),
            "try" => {
                let here = completed.iter().any(|(op, _)| op == id);
                if self.ops[id].ready == Some(true) && !was_completed && !here {
                    return Err(format!(
                        "no_lost_wakeup: try({id:?}) did not complete it although its condition holds"
                    ));
                }
                expect(json!(here))
            }
            _ => Ok(()),
        }
    }

    /// Judges a purgatory command's events in order; returns its completions, (op, via) each.
    fn events(&mut self, step: &Json, observed: &Observed) -> Result<Vec<(String, String)>, String> {
        let cmd = step["cmd"].as_str().unwrap_or_default();
        let mut completed = Vec::new();
        for (index, event) in observed.events.iter().enumerate() {
            let (id, via) = (event["op"].as_str().unwrap_or_default(), event["via"].as_str().unwrap_or_default());
            match event["event"].as_str().unwrap_or_default() {
                "complete" => {
                    self.complete(step, id, via)?;
                    completed.push((id.to_owned(), via.to_owned()));
                }
                "expire" => {
                    if index == 0
                        || observed.events[index - 1] != json!({"event": "complete", "op": id, "via": "expire"})
                    {
                        return Err(format!(
                            "exactly_once: onExpiration of {id:?} not right after its completion by expiry"
                        ));
                    }
                }
                "purge" if cmd == "advance" => self.stale.clear(),
                "purge" => {
                    return Err(format!("purge_rule: a purge during {cmd}; purges run only after a timer advance"))
                }
                "stale_try" => {
                    return Err(format!(
                        "justified: {cmd} called tryComplete on {id:?}, already completed (KAFKA-17848)"
                    ))
                }
                _ => return Err(format!("event {event} is not a purgatory event")),
            }
        }
        Ok(completed)
    }

    fn complete(&mut self, step: &Json, id: &str, via: &str) -> Judged {
        let (cmd, args) = (step["cmd"].as_str().unwrap_or_default(), &step["args"]);
        let Some(op) = self.ops.get(id) else {
            return Err(format!("justified: completion of {id:?}, which was never watched"));
        };
        if op.completed {
            return Err(format!("exactly_once: {id:?} completed a second time (via {via})"));
        }
        if (via == "try" || via == "check") && !op.may_hold() {
            return Err(format!("justified: {id:?} completed via {via} but its condition does not hold"));
        }
        if !route(via).contains(&cmd) || args["op"].as_str().is_some_and(|named| named != id) {
            return Err(format!("justified: {id:?} completed via {via} during {cmd}"));
        }
        let key = args["key"].as_str().unwrap_or_default();
        if via == "check" && self.live.get(key).and_then(|entries| entries.get(id)).is_none() {
            return Err(format!("justified: {id:?} completed via check of {key:?}, not a key it is watched on"));
        }
        let window = self.pending.get(id).copied();
        self.unschedule(id);
        if via == "expire" {
            match window {
                None => return Err(format!("justified: {id:?} expired but was not in the timer")),
                Some((lo, hi)) if self.now < lo => {
                    return Err(format!(
                        "on_time: op {id:?} expired at {}, early: its {} firing window is [{lo}, {}]",
                        self.now,
                        self.firing,
                        hi.map_or("null".to_owned(), |hi| hi.to_string())
                    ))
                }
                Some(_) => {}
            }
        }
        self.ops.get_mut(id).unwrap().completed = true;
        for (key, entries) in self.live.iter_mut() {
            if let Some(n) = entries.remove(id) {
                *self.stale.entry(key.clone()).or_default().entry(id.to_owned()).or_default() += n;
            }
        }
        Ok(())
    }

    /// The entries a lazy size may still count.
    fn lazy(&self) -> &[String] {
        if self.lazy_size {
            &self.departed
        } else {
            &[]
        }
    }
}
