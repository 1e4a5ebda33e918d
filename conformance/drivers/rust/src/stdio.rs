//! The stdio binding: an adapter process speaking specs/protocol.md (JSON Lines on stdin/stdout), started with
//! `sh -c "exec $KPURGATORY_ADAPTER"`. Its `hello` says what it implements and declares; `$KPURGATORY_LEVEL`
//! (`exact` unless set) is the level it is judged at. Cases run in parallel, so idle adapters wait in a pool and each
//! case sends its own `init`. A call with no answer within the call timeout is hung, an adapter that dies crashed:
//! either way that adapter is killed and the next case gets a new one. The same client drives the child process that
//! serves an in-process binding (`child`).

use crate::{call_timeout, Binding, Info, Json, Level, Observed, Refusal, System, UNRUNNABLE};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio as Piped};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::{env, thread};

pub fn binding() -> Result<Box<dyn Binding>, String> {
    let command = env::var("KPURGATORY_ADAPTER").map_err(|_| {
        "KPURGATORY_ADAPTER is not set: give the command that starts your adapter, e.g. `python -m \
         kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.builtin:factory`"
            .to_owned()
    })?;
    let level = match env::var("KPURGATORY_LEVEL").as_deref() {
        Err(_) | Ok("exact") => Level::Exact,
        Ok("contract") => Level::Contract,
        Ok(other) => return Err(format!("KPURGATORY_LEVEL={other} is neither exact nor contract")),
    };
    let launch: Launch = Arc::new(move || {
        let mut shell = Command::new("sh");
        shell.arg("-c").arg(format!("exec {command}"));
        shell
    });
    let (adapter, hello) = Adapter::spawn(&launch, false).map_err(|refusal| refusal.text())?;
    let names = |field: &str| -> Vec<String> {
        hello[field].as_array().into_iter().flatten().filter_map(Json::as_str).map(str::to_owned).collect()
    };
    let info = Info {
        implementation: hello["implementation"].as_str().unwrap_or("stdio adapter").to_owned(),
        level,
        declarations: hello["declarations"].as_object().cloned().unwrap_or_default(),
        profiles: names("profiles"),
        features: names("features"),
        unsupported_commands: names("unsupported_commands"),
    };
    Ok(Box::new(StdioBinding { launch, child: false, info, idle: Arc::new(Mutex::new(vec![adapter])) }))
}

/// The binding `info` describes, served by a child process: this test binary run again with `variable` set, which
/// serves the binding on its stdin and stdout (`crate::serve`). Its other output may reach stdout too: the client
/// passes over lines that are not JSON.
pub(crate) fn child(info: Info, variable: &'static str, binding: String) -> Result<Box<dyn Binding>, String> {
    let executable = env::current_exe().map_err(|e| format!("cannot find the test binary: {e}"))?;
    let launch: Launch = Arc::new(move || {
        let mut child = Command::new(&executable);
        child.env(variable, "1").env("KPURGATORY_BINDING", &binding);
        child
    });
    Ok(Box::new(StdioBinding { launch, child: true, info, idle: Arc::new(Mutex::new(Vec::new())) }))
}

/// Makes the command that starts an adapter.
type Launch = Arc<dyn Fn() -> Command + Send + Sync>;

struct StdioBinding {
    launch: Launch,
    child: bool,
    info: Info,
    idle: Arc<Mutex<Vec<Adapter>>>,
}

impl Binding for StdioBinding {
    fn info(&self) -> &Info {
        &self.info
    }
    fn out_of_process(&self) -> bool {
        true
    }
    fn start(&self, profile: &str, params: &Json) -> Result<Box<dyn System>, String> {
        let idle = self.idle.lock().unwrap().pop();
        let mut adapter = match idle {
            Some(adapter) => adapter,
            None => Adapter::spawn(&self.launch, self.child).map_err(|refusal| refusal.text())?.0,
        };
        adapter.request("init", &json!({"profile": profile, "params": params})).map_err(|refusal| refusal.text())?;
        Ok(Box::new(Run { adapter: Some(adapter), idle: self.idle.clone() }))
    }
}

/// One case's run; a healthy adapter goes back to the pool afterwards.
struct Run {
    adapter: Option<Adapter>,
    idle: Arc<Mutex<Vec<Adapter>>>,
}

impl System for Run {
    fn call(&mut self, cmd: &str, args: &Json) -> Result<Observed, Refusal> {
        let adapter = self.adapter.as_mut().ok_or(Refusal::Failed("the adapter failed earlier in this run".into()))?;
        match adapter.request(cmd, args) {
            Ok(response) => Ok(Observed {
                result: response["result"].clone(),
                events: response["events"].as_array().cloned().unwrap_or_default(),
                error: response["error"].as_str().map(str::to_owned),
            }),
            Err(refusal) => {
                // a failure ends the run (specs/protocol.md §6): this process is not reused
                self.adapter = None;
                Err(refusal)
            }
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(adapter) = self.adapter.take() {
            self.idle.lock().unwrap().push(adapter);
        }
    }
}

struct Adapter {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// the start of what the adapter wrote to stderr since the last request: a crash's own words
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_closed: Receiver<()>,
    /// pass over stdout lines that are not JSON (a child serving an in-process binding may print)
    lenient: bool,
    seq: i64,
}

impl Adapter {
    /// Starts the adapter and says `hello`; returns it with hello's result.
    fn spawn(launch: &Launch, lenient: bool) -> Result<(Adapter, Json), Refusal> {
        let mut command = launch();
        let mut child = command
            .stdin(Piped::piped())
            .stdout(Piped::piped())
            .stderr(Piped::piped())
            .spawn()
            .map_err(|e| Refusal::Failed(format!("cannot start {command:?}: {e}")))?;
        let (stdin, stdout, mut stderr_pipe) =
            (child.stdin.take().unwrap(), child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let (send, lines) = channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let (stderr, (closed, stderr_closed)) = (Arc::new(Mutex::new(Vec::new())), channel());
        let head = stderr.clone();
        thread::spawn(move || {
            let mut buffer = [0; 4096];
            while let Ok(n @ 1..) = stderr_pipe.read(&mut buffer) {
                let mut head = head.lock().unwrap();
                let room = 4096usize.saturating_sub(head.len()).min(n);
                head.extend_from_slice(&buffer[..room]);
            }
            let _ = closed.send(());
        });
        let mut adapter = Adapter { child, stdin, lines, stderr, stderr_closed, lenient, seq: 0 };
        let hello = adapter.request("hello", &json!({"protocol_version": 1}))?;
        let hello = hello["result"].clone();
        if hello["protocol_version"] != 1 {
            return Err(Refusal::Failed(format!(
                "{command:?} answered hello with protocol_version {}",
                hello["protocol_version"]
            )));
        }
        Ok((adapter, hello))
    }

    fn request(&mut self, cmd: &str, args: &Json) -> Result<Json, Refusal> {
        let seq = self.seq;
        self.seq += 1;
        self.stderr.lock().unwrap().clear();
        let line = json!({"seq": seq, "cmd": cmd, "args": args}).to_string() + "\n";
        // a dead adapter shows as the end of its output, below
        let _ = self.stdin.write_all(line.as_bytes()).and_then(|_| self.stdin.flush());
        let timeout = call_timeout();
        let response = loop {
            let answer = match self.lines.recv_timeout(timeout) {
                Ok(answer) => answer,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    return Err(Refusal::Hung(format!("no answer to {cmd} within {timeout:?}")));
                }
                Err(RecvTimeoutError::Disconnected) => return Err(Refusal::Crashed(self.last_words(cmd))),
            };
            match serde_json::from_str::<Json>(answer.trim_end_matches('\r')) {
                Ok(response) if !self.lenient || response.get("seq").is_some() => break response,
                Err(e) if !self.lenient => {
                    return Err(Refusal::Failed(format!(
                        "{cmd}: the adapter answered a line that is not JSON ({e}): {answer:?}"
                    )))
                }
                _ => continue, // the child's own output
            }
        };
        if response["seq"] != seq {
            return Err(Refusal::Failed(format!("{cmd}: the answer has seq {}, expected {seq}", response["seq"])));
        }
        if let Some(hung) = response.get("hung") {
            return Err(Refusal::Hung(format!("{cmd}: the adapter stopped it: {}", text(hung))));
        }
        if let Some(failure) = response.get("failure") {
            let failure = text(failure);
            return Err(match failure.strip_prefix(UNRUNNABLE) {
                Some(reason) => Refusal::Unrunnable(reason.to_owned()),
                None => Refusal::Failed(failure),
            });
        }
        Ok(response)
    }

    /// What a dead adapter said: the first lines it wrote to stderr, how it ended, during which command.
    fn last_words(&mut self, cmd: &str) -> String {
        let _ = self.child.kill();
        let status = self.child.wait().map(|status| status.to_string()).unwrap_or_else(|e| e.to_string());
        // its children may hold stderr open: what came by then is what there is
        let _ = self.stderr_closed.recv_timeout(Duration::from_secs(1));
        let head = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
        let lines: Vec<&str> = head.lines().map(str::trim).filter(|line| !line.is_empty()).take(3).collect();
        let said =
            if lines.is_empty() { "the adapter exited without a word on stderr".into() } else { lines.join("; ") };
        format!("{said} ({status}, during {cmd})")
    }
}

/// A failure's text: a JSON string as it is, anything else as JSON.
fn text(value: &Json) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

impl Drop for Adapter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
