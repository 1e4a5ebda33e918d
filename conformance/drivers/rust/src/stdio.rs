//! The stdio binding: an adapter process speaking specs/protocol.md (JSON Lines on stdin/stdout), started with
//! `sh -c "$KPURGATORY_ADAPTER"`. Its `hello` says what it implements and declares; `$KPURGATORY_LEVEL`
//! (`exact` unless set) is the level it is judged at. Cases run in parallel, so idle adapters wait in a pool and each
//! case sends its own `init`.

use crate::{Binding, Info, Json, Level, Observed, Refusal, System};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio as Piped};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::{env, thread};

/// How long an answer may take (the harness's `--timeout` default).
const TIMEOUT: Duration = Duration::from_secs(10);

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
    let (adapter, hello) = Adapter::spawn(&command)?;
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
    Ok(Box::new(StdioBinding { command, info, idle: Arc::new(Mutex::new(vec![adapter])) }))
}

struct StdioBinding {
    command: String,
    info: Info,
    idle: Arc<Mutex<Vec<Adapter>>>,
}

impl Binding for StdioBinding {
    fn info(&self) -> &Info {
        &self.info
    }
    fn start(&self, profile: &str, params: &Json) -> Result<Box<dyn System>, String> {
        let idle = self.idle.lock().unwrap().pop();
        let mut adapter = match idle {
            Some(adapter) => adapter,
            None => Adapter::spawn(&self.command)?.0,
        };
        adapter.request("init", &json!({"profile": profile, "params": params}))?;
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
            Err(e) => {
                // a failure ends the run (specs/protocol.md §6): this process is not reused
                self.adapter = None;
                Err(Refusal::Failed(e))
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
    seq: i64,
}

impl Adapter {
    /// Starts the adapter and says `hello`; returns it with hello's result.
    fn spawn(command: &str) -> Result<(Adapter, Json), String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {command}"))
            .stdin(Piped::piped())
            .stdout(Piped::piped())
            .spawn()
            .map_err(|e| format!("cannot start `{command}`: {e}"))?;
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let (send, lines) = channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut adapter = Adapter { child, stdin, lines, seq: 0 };
        let hello = adapter.request("hello", &json!({"protocol_version": 1}))?;
        let hello = hello["result"].clone();
        if hello["protocol_version"] != 1 {
            return Err(format!("`{command}` answered hello with protocol_version {}", hello["protocol_version"]));
        }
        Ok((adapter, hello))
    }

    fn request(&mut self, cmd: &str, args: &Json) -> Result<Json, String> {
        let seq = self.seq;
        self.seq += 1;
        let line = json!({"seq": seq, "cmd": cmd, "args": args}).to_string() + "\n";
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("{cmd}: cannot write to the adapter: {e}"))?;
        let answer = match self.lines.recv_timeout(TIMEOUT) {
            Ok(answer) => answer,
            Err(_) => {
                let _ = self.child.kill();
                return Err(format!("{cmd}: no answer within {TIMEOUT:?} (the adapter hung or exited)"));
            }
        };
        let response: Json = serde_json::from_str(answer.trim_end_matches('\r'))
            .map_err(|e| format!("{cmd}: the adapter answered a line that is not JSON ({e}): {answer:?}"))?;
        if response["seq"] != seq {
            return Err(format!("{cmd}: the answer has seq {}, expected {seq}", response["seq"]));
        }
        if let Some(failure) = response.get("failure") {
            return Err(format!("{cmd}: the adapter reported a failure: {failure}"));
        }
        Ok(response)
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
