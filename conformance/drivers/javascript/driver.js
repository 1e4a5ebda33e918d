"use strict";
// Runs kpurgatory's test vectors (its specs/vectors.md) against a binding, one node:test test per case.
//
// A case is a trace (specs/protocol.md §9) with the model's observations; the driver sends its commands to the
// binding and judges the answers at the binding's level: exact (the same results and errors, events equal as a
// sequence of the step's event groups) or contract (a tracker of what is pending with its firing window, and of the
// purgatory's ops and watch entries). Every 64-bit integer is a BigInt: JSON.parse would round those above 2^53.
// Each binding call has KPURGATORY_VECTORS_CALL_TIMEOUT_MS to answer; one that fails, hangs or crashes fails its case
// only, and the stdio and module bindings then drop their adapter or worker (`drop`) for a new one.

const fs = require("node:fs");
const path = require("node:path");
const { after, test } = require("node:test");
const { isDeepStrictEqual } = require("node:util");
const { parse, stringify, isInteger } = require("lossless-json");

const LONG_MAX = 2n ** 63n - 1n;
const LIMIT_MS = Number(process.env.KPURGATORY_VECTORS_CALL_TIMEOUT_MS || 10_000);
// A binding that can drop its process or worker after a call that did not answer (the next create starts another).
const drop = Symbol("drop");
const READ_OUTS = new Set(["wheel", "delay_queue", "watcher_keys"]);
// Kafka's behaviour, what a binding that declares nothing promises (specs/protocol.md §3)
const KAFKA = { firing: "kafka", lazy_size: false, max_deadline_ms: LONG_MAX, beyond_max_deadline: "rejected",
  negative_delays: "run_at_once", runs_due_on_update: false };

// Integers become BigInts; a fraction or exponent where the protocol has integers only is kept as a Number, which
// never equals an expected BigInt.
const parseJson = (text) => parse(text, null, (value) => (isInteger(value) ? BigInt(value) : Number(value)));
const toJson = (value) => stringify(value);

// Text from a trace or an implementation reaches the terminal escaped: no control characters, no line separators.
const escape = (text) => String(text).replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g,
  (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
const show = (value) => escape(value === undefined ? "(nothing)" : toJson(value));

// Numbers are BigInts whatever the implementation returned, so that 3 and 3n compare equal.
function canonical(value) {
  if (typeof value === "number" && Number.isInteger(value)) return BigInt(value);
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, canonical(v)]));
  }
  return value === undefined ? null : value;
}

const byText = (a, b) => (toJson(a) < toJson(b) ? -1 : toJson(a) > toJson(b) ? 1 : 0);

// Results that are sets in meaning compare sorted: shutdown's ids, the entries of one bucket of the wheel read-out.
function normalise(cmd, result) {
  if (cmd === "shutdown" && Array.isArray(result)) return [...result].sort(byText);
  if (cmd === "wheel" && result && Array.isArray(result.levels)) {
    return { ...result, levels: result.levels.map((level) => ({ ...level,
      buckets: (level.buckets || []).map((b) => ({ ...b, entries: [...(b.entries || [])].sort(byText) })) })) };
  }
  return result;
}

function readTree(root) {
  if (!root) {
    throw new Error("KPURGATORY_VECTORS is not set: point it at a vector tree, made with `kpurgatory vectors DIR`");
  }
  const index = parseJson(fs.readFileSync(path.join(root, "index.json"), "utf8"));
  if (index.format !== "kpurgatory-vectors" || index.version !== 1n) {
    throw new Error(`${path.join(root, "index.json")}: not a kpurgatory-vectors tree of version 1`);
  }
  return index;
}

function readCase(root, entry) {
  const file = path.resolve(root, entry.path);
  if (!file.startsWith(path.resolve(root) + path.sep)) throw new Error(`case path ${escape(entry.path)} leaves the tree`);
  const lines = fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map(parseJson);
  return { header: lines[0], steps: lines.slice(1) };
}

// Why the binding cannot run a case, from the index alone, or null.
function whySkip(binding, entry) {
  if (!binding.profiles.includes(entry.profile)) return `profile ${entry.profile} is not implemented`;
  const lacking = entry.commands.filter((cmd) => !READ_OUTS.has(cmd) && !binding.commands.includes(cmd));
  if (lacking.length) return `uses ${lacking.join(", ")}, which the binding does not support`;
  const rejected = binding.accepts ? binding.accepts(entry.profile, entry.params) : null;
  if (rejected) return rejected;
  const declared = binding.declarations.kafka_version ?? null;
  if ((entry.kafka_version ?? null) !== declared) {
    return `pinned to Kafka ${entry.kafka_version ?? "(current)"}; the binding declares ${declared ?? "current Kafka"}`;
  }
  return null;
}

// The instance method for a protocol command, and its arguments in order.
const CALLS = {
  timer_add: (a) => ["add", a.task, a.delay_ms],
  timer_cancel: (a) => ["cancel", a.task],
  advance: (a) => ["advance", a.to_ms],
  watch: (a) => ["watch", a.op, a.keys, a.delay_ms, a.ready_on],
  set_ready: (a) => ["setReady", a.op, a.ready ?? true],
  check: (a) => ["check", a.key],
  cancel_key: (a) => ["cancelKey", a.key],
  force: (a) => ["force", a.op],
  try: (a) => ["try", a.op],
  cancel: (a) => ["cancel", a.op],
  delay_queue: () => ["delayQueue"],
  watcher_keys: () => ["watcherKeys"],
};

// A binding call within the per-call limit: {value}, {error} (it threw or rejected), or {outcome: "hung", text}. A
// synchronous loop in this thread cannot be stopped: in-process bindings given by module run in a worker (isolated.js).
async function within(what, body) {
  let timer;
  const limit = new Promise((resolve) => {
    timer = setTimeout(() => resolve({ outcome: "hung", text: `no answer to ${what} within ${LIMIT_MS / 1000} s` }), LIMIT_MS);
  });
  try {
    return await Promise.race([Promise.resolve().then(body).then((value) => ({ value }), (error) => ({ error })), limit]);
  } finally {
    clearTimeout(timer);
  }
}

// What the implementation answered, {result, events, error}; or {outcome, failure} when it failed, hung or crashed
// (specs/vectors.md §4), with the failure text the observed trace records.
async function call(instance, events, step) {
  const [method, ...args] = (CALLS[step.cmd] || (() => [step.cmd]))(step.args);
  events.length = 0;
  const got = await within(step.cmd, () => instance[method](...args));
  if ("value" in got) return { result: got.value === undefined ? null : got.value, events: [...events] };
  const { error } = got;
  if (error && (error.code === "delay_out_of_range" || error.code === "empty_keys")) {
    return { result: null, events: [...events], error: error.code };
  }
  const outcome = got.outcome || (error && error.outcome) || "failed";
  return { outcome, failure: `${outcome}: ${got.text || (error && error.outcome ? error.message : String(error))}` };
}

// The exact level: the first difference between the model's step and the answer, or null.
function exactDifference(step, answer) {
  const expectedError = step.error ?? null;
  if (expectedError !== (answer.error ?? null)) return `error: expected ${show(expectedError)}, observed ${show(answer.error ?? null)}`;
  const want = normalise(step.cmd, canonical(step.result)), got = normalise(step.cmd, canonical(answer.result));
  if (!isDeepStrictEqual(want, got)) return `result: expected ${show(want)}, observed ${show(got)}`;
  const expected = canonical(step.events), observed = canonical(answer.events);
  if (expected.length !== observed.length) {
    return `events: expected ${show(expected)}, observed ${show(observed)}`;
  }
  const sizes = step.expect && step.expect.groups ? step.expect.groups.map(Number) : [expected.length];
  let start = 0;
  for (const size of sizes) {
    const want = expected.slice(start, start + size).sort(byText), got = observed.slice(start, start + size).sort(byText);
    if (!isDeepStrictEqual(want, got)) {
      return `events ${start + 1}..${start + size} (one group, any order): expected ${show(want)}, observed ${show(got)}`;
    }
    start += size;
  }
  return null;
}

// The contract level (specs/vectors.md §5.2, §5.3; model/contract.py), from the cases' expect aids: what is pending in
// the timer (tasks, or ops) with the firing window of its last scheduling under the declared firing; for the
// purgatory also each op's condition and completion and each key's watch entries. A violation reads "property: ...".
const ROUTES = { try: ["watch", "try"], check: ["check"], force: ["force"], expire: ["advance", "watch"] };

// A multiset of op ids: id -> count.
const add = (multiset, id, n = 1) => multiset.set(id, (multiset.get(id) || 0) + n);
const total = (byKey) => [...byKey.values()].reduce((sum, entries) => sum + [...entries.values()].reduce((a, b) => a + b, 0), 0);
const showSet = (multiset) => show(Object.fromEntries([...(multiset || new Map())].sort()));

class Contract {
  constructor(profile, declarations, params) {
    this.timer = profile === "timer";
    this.declared = { ...KAFKA, ...declarations };
    this.declared.max_deadline_ms = BigInt(this.declared.max_deadline_ms);
    this.now = params.start_ms;
    this.pending = new Map(); // task or op -> [lo, hi]
    this.departed = []; // left the timer since the last advance (what lazy_size may still count)
    this.ops = new Map(); // op -> {readyOn, delayMs, ready, done}
    this.live = new Map(); // key -> multiset of ops not completed
    this.stale = new Map(); // key -> multiset of completed ops a system may still list
    this.completed = new Map(); // op -> route, of the step being judged
    this.judging = true;
  }

  leave(id) {
    if (this.pending.delete(id)) this.departed.push(id);
  }

  op(id) {
    if (!this.ops.has(id)) this.ops.set(id, { readyOn: false, delayMs: 0n, ready: null, done: false });
    return this.ops.get(id);
  }

  entries(byKey, key) {
    if (!byKey.has(key)) byKey.set(key, new Map());
    return byKey.get(key);
  }

  // The violation this step shows, or null; sets `judging` false at an input the declarations leave undefined.
  judge(step, answer) {
    const { cmd, args } = step;
    const result = canonical(answer.result);
    if (cmd === "timer_add" || cmd === "watch") return this.schedule(step, answer, result);
    if (answer.error) return `domain: error ${show(answer.error)} from ${cmd}`;
    let due = null;
    if (cmd === "timer_cancel") {
      due = this.dueOnUpdate(args.task);
      this.leave(args.task);
    }
    if (cmd === "cancel") this.leave(args.op);
    if (cmd === "advance") this.now = args.to_ms;
    if (cmd === "set_ready") this.op(args.op).ready = args.ready ?? true;
    if (cmd === "check") return this.check(args, answer, result);
    if (cmd === "cancel_key") return this.cancelKey(args.key, answer, result);
    if (cmd === "watched") {
      const entries = BigInt(total(this.live)), most = entries + BigInt(total(this.stale));
      if (typeof result !== "bigint" || result < entries || result > most) {
        return `watcher_cleanup: watched() = ${show(result)}; expected between ${entries} live entries and ${most} `
          + "(with completed entries not yet due for removal)";
      }
    }
    if (cmd === "watcher_keys") {
      const keys = (byKey) => [...byKey].filter(([, entries]) => entries.size).map(([key]) => key).sort();
      const listed = Array.isArray(result) ? result : [], live = keys(this.live), most = [...live, ...keys(this.stale)];
      if (!live.every((key) => listed.includes(key)) || !listed.every((key) => most.includes(key))) {
        return `watcher_cleanup: watcher_keys() = ${show(listed)}; expected the keys ${show(live)}, plus possibly those of ${show(most)}`;
      }
    }
    const wasDone = cmd === "force" || cmd === "try" ? this.op(args.op).done : false;
    const mustComplete = cmd === "try" && this.op(args.op).ready === true && !wasDone;
    const wrong = this.events(step, answer, due);
    if (wrong) return wrong;
    if (cmd === "force") return this.result(cmd, result, !wasDone);
    if (cmd === "try") {
      const here = this.completed.has(args.op);
      if (mustComplete && !here) return `no_lost_wakeup: try(${show(args.op)}) did not complete it although its condition holds`;
      return this.result(cmd, result, here);
    }
    if (cmd === "advance") {
      this.departed = [];
      // hi null: the window ends past 2^63-1, never late (and null <= n would be true, null counting as 0)
      const late = [...this.pending].filter(([, [, hi]]) => hi !== null && hi <= this.now).map(([id]) => id).sort();
      if (late.length) return `on_time: still pending after advance to ${this.now}, past their window: ${show(late)}`;
    }
    if (cmd === "size" || cmd === "delayed") {
      const n = BigInt(this.pending.size), lazy = this.declared.lazy_size ? BigInt(this.departed.length) : 0n;
      if (typeof result !== "bigint" || result < n || result > n + lazy) {
        return `counters: ${cmd} ${show(result)}; expected ${lazy ? `between ${n} and ${n + lazy} (lazy_size)` : n}`;
      }
    }
    if (cmd === "shutdown") {
      const reported = Array.isArray(result) ? result : [];
      const allowed = new Set([...this.pending.keys(), ...(this.declared.lazy_size ? this.departed : [])]);
      const missing = [...this.pending.keys()].filter((id) => !reported.includes(id));
      if (!Array.isArray(result) || new Set(reported).size !== reported.length || missing.length
          || reported.some((id) => !allowed.has(id))) {
        return `counters: shutdown ${show(result)}; pending: ${show([...this.pending.keys()].sort())}`;
      }
    }
    return null;
  }

  // A timer_add or a watch: the domain of its deadline, then its entry, events and result.
  schedule(step, answer, result) {
    const { cmd, args } = step;
    const watch = cmd === "watch", id = watch ? args.op : args.task;
    if (watch && !this.ops.has(id)) {
      this.ops.set(id, { readyOn: args.ready_on != null, delayMs: args.delay_ms ?? 0n, ready: null, done: false });
    }
    const op = watch ? this.ops.get(id) : null;
    if (watch && args.keys.length === 0) {
      return answer.error === "empty_keys" && answer.events.length === 0 ? null
        : `domain: a watch with no keys answered ${show(answer)}, not the error empty_keys`;
    }
    const delay = watch ? op.delayMs : args.delay_ms, deadline = step.expect.deadline_ms, d = this.declared;
    const treatment = deadline === null || deadline > d.max_deadline_ms ? d.beyond_max_deadline
      : delay < 0n && d.negative_delays !== "run_at_once" ? d.negative_delays : "accepted";
    const rejected = answer.error === "delay_out_of_range";
    if (treatment === "undefined") {
      this.judging = false;
      return null;
    }
    if ((treatment === "rejected") !== rejected) {
      return `domain: ${cmd} with delay_ms=${delay} at ${this.now} ${rejected ? "was rejected, but its deadline is inside "
        + "the declared domain" : "is outside the declared domain and must be rejected with delay_out_of_range"}`;
    }
    if (rejected) return answer.events.length ? `domain: a rejected ${cmd} caused events` : null;
    if (answer.error) return `${watch ? "justified" : "domain"}: error ${show(answer.error)} from an accepted ${cmd}`;
    const due = watch ? null : this.dueOnUpdate(id);
    if (watch && op.done) {
      if (step.expect.relist_completed) for (const key of args.keys) add(this.entries(this.stale, key), id);
    } else {
      if (watch) for (const key of args.keys) add(this.entries(this.live, key), id);
      this.leave(id);
      // hi is null when the window's end lies past 2^63-1 (specs/vectors.md §2): no advance reaches it, so the
      // entry is never late; kept null rather than clamped, as a hi of exactly 2^63-1 is late after an advance to it
      this.pending.set(id, step.expect.windows[d.firing].map((bound) => (bound === null ? null : BigInt(bound))));
    }
    return this.events(step, answer, due) || (watch ? this.result(cmd, result, this.completed.get(id) === "try") : null);
  }

  check(args, answer, result) {
    const listed = new Map(this.live.get(args.key) || []);
    const wrong = this.events({ cmd: "check", args }, answer, null);
    if (wrong) return wrong;
    const kept = new Map();
    for (const [id, n] of listed) {
      const here = this.completed.get(id) === "check";
      if (!here && this.ops.get(id).ready === true) {
        return `no_lost_wakeup: check(${show(args.key)}) did not complete ${show(id)}, whose condition holds and which is watched on that key`;
      }
      if (here && n > 1) kept.set(id, n - 1); // the walk removed the entries it visited
    }
    this.stale.delete(args.key);
    if (kept.size) this.stale.set(args.key, kept);
    const viaCheck = BigInt([...this.completed.values()].filter((via) => via === "check").length);
    return result === viaCheck ? null : `justified: check returned ${show(result)}; the observations imply ${viaCheck}`;
  }

  cancelKey(key, answer, result) {
    const mine = this.live.get(key) || new Map(), also = this.stale.get(key) || new Map();
    const returned = new Map();
    for (const id of Array.isArray(result) ? result : []) add(returned, id);
    const fits = Array.isArray(result) && [...mine].every(([id, n]) => (returned.get(id) || 0) >= n)
      && [...returned].every(([id, n]) => n <= (mine.get(id) || 0) + (also.get(id) || 0));
    if (!fits) {
      return `watcher_cleanup: cancel_key(${show(key)}) returned ${show(result)}; the key's entries are ${showSet(mine)} `
        + `plus possibly ${showSet(also)} completed ones`;
    }
    this.live.delete(key);
    this.stale.delete(key);
    for (const id of mine.keys()) this.leave(id);
    return this.events({ cmd: "cancel_key", args: { key } }, answer, null);
  }

  // The step's events in order; with runs_due_on_update, `due` is the task whose old, due entry may run in this call.
  events(step, answer, due) {
    this.completed.clear();
    let previous = null;
    for (const event of answer.events) {
      const wrong = this.timer !== (event.event === "run")
        ? `${this.timer ? "justified" : "exactly_once"}: ${show(event)} is not a ${this.timer ? "timer" : "purgatory"} event`
        : event.event === "run" ? this.run(event.task, due)
        : event.event === "complete" ? this.complete(step, event.op, event.via)
        : event.event === "expire" ? (previous && previous.event === "complete" && previous.via === "expire"
          && previous.op === event.op ? null : `exactly_once: onExpiration of ${show(event.op)} not right after its completion by expiry`)
        : event.event === "purge" ? this.purge(step.cmd)
        : event.event === "stale_try" ? `justified: ${step.cmd} called tryComplete on ${show(event.op)}, already completed (KAFKA-17848)`
        : `exactly_once: ${show(event)} is not a purgatory event`;
      if (wrong) return wrong;
      if (event.event === "run" && event.task === due) due = null; // the old entry's one run
      previous = event;
    }
    return null;
  }

  run(task, due) {
    if (task === due) return null; // the old, due entry run by the update; a re-add's new entry stays pending
    const window = this.pending.get(task);
    if (!window) return `exactly_once: task ${show(task)} ran but was not pending (twice, after a cancel, or never added)`;
    if (this.now < window[0]) return `on_time: task ${show(task)} ran at ${this.now}, before its window ${show(window)} opened`;
    this.leave(task);
    return null;
  }

  complete({ cmd, args }, id, via) {
    const op = this.ops.get(id);
    if (!op) return `justified: completion of ${show(id)}, which was never watched`;
    if (op.done) return `exactly_once: ${show(id)} completed a second time (via ${via})`;
    if ((via === "try" || via === "check") && !(op.ready ?? op.readyOn)) {
      return `justified: ${show(id)} completed via ${via} but its condition ${op.ready === false ? "had been cleared" : "never held"}`;
    }
    if (!(ROUTES[via] || []).includes(cmd) || (args.op !== undefined && args.op !== id)) {
      return `justified: ${show(id)} completed via ${via} during ${cmd}`;
    }
    if (via === "check" && !(this.live.get(args.key) || new Map()).get(id)) {
      return `justified: ${show(id)} completed via check of ${show(args.key)}, not a key it is watched on`;
    }
    const window = this.pending.get(id);
    this.leave(id);
    if (via === "expire" && !window) return `justified: ${show(id)} expired but was not in the timer`;
    if (via === "expire" && this.now < window[0]) return `on_time: ${show(id)} expired at ${this.now}, before its window ${show(window)} opened`;
    op.done = true;
    this.completed.set(id, via);
    for (const [key, entries] of this.live) {
      if (entries.has(id)) {
        add(this.entries(this.stale, key), id, entries.get(id));
        entries.delete(id);
      }
    }
    return null;
  }

  purge(cmd) {
    this.stale.clear();
    return cmd === "advance" ? null : `purge_rule: a purge during ${cmd}; purges run only during an advance`;
  }

  // A watch, try or force returns whether it completed the op: what the events say.
  result(cmd, result, expected) {
    return result === expected ? null : `justified: ${cmd} returned ${show(result)}; the observations imply ${expected}`;
  }

  // With runs_due_on_update, the task whose entry is pending and due, which the update may run.
  dueOnUpdate(task) {
    const window = this.pending.get(task);
    return this.declared.runs_due_on_update && window && window[0] <= this.now ? task : null;
  }
}

// The observed run as a trace: the case's lines up to the failing step, each with what the binding answered.
function writeObserved(binding, entry, kase, answers, outDir) {
  const header = { ...kase.header, header: { ...kase.header.header, implementation: binding.name,
    declarations: binding.declarations } };
  if (Object.keys(binding.declarations).length === 0) delete header.header.declarations;
  const lines = [header, ...kase.steps.slice(0, answers.length).map((step, i) => (answers[i] ? { ...step, system: answers[i] } : step))];
  fs.mkdirSync(outDir, { recursive: true });
  const file = path.resolve(outDir, `${String(entry.id).replace(/[^A-Za-z0-9._-]/g, "_")}.observed.jsonl`);
  fs.writeFileSync(file, lines.map((line) => `${toJson(line)}\n`).join(""));
  return file;
}

// A failed case: its message is the whole report (no stack: the driver's frames say nothing about the case).
class CaseFailure extends Error {
  constructor(message, step, observed, finding = null) {
    super(message);
    this.name = "CaseFailure";
    this.stack = `${this.name}: ${message}`;
    Object.defineProperties(this, { step: { value: step }, observed: { value: observed }, finding: { value: finding } });
  }
}

// The Kafka finding whose outcome this is (specs/vectors.md §5.4), or null: `kafka` is the step's expect.kafka,
// `families` the index's [family, substrings] pairs, first match wins.
function asKafka(kafka, families, answer) {
  const answered = answer.failure === undefined;
  const runs = new Set(kafka.runs || []);
  const text = answered ? "" : answer.failure.toLowerCase();
  const [family] = answer.outcome !== "failed" ? [] : families.find(([, words]) => words.some((w) => text.includes(w)))
    // a hot JVM may drop the message of ArithmeticException: / by zero
    || (text.includes("arithmeticexception") && !text.includes("overflow") ? ["divide-by-zero"] : []);
  const does = kafka.anything
    || (answered && !answer.error && kafka.answers)
    || (answered && answer.events.some((e) => (e.event === "run" && runs.has(e.task)) || (e.event === "expire" && runs.has(e.op))))
    || (family !== undefined && (kafka.fails || []).includes(family))
    || (answer.outcome === "hung" && kafka.hangs)
    || (answer.outcome === "crashed" && kafka.crashes);
  return does ? kafka.finding : null;
}

// Runs one case: throws a CaseFailure naming the case, the step, expected vs observed and the observed run; returns
// {finding, ...} when a binding that follows a Kafka release does as Kafka does, {skip} when the case cannot be judged.
async function runCase(binding, families, root, entry, outDir) {
  const kase = readCase(root, entry);
  const params = kase.header.header.params;
  const events = [];
  const emit = (event) => events.push(event);
  const contract = binding.level === "contract" ? new Contract(entry.profile, binding.declarations, params) : null;
  const created = await within("init", () => binding.create(entry.profile, params, emit));
  if (!("value" in created)) {
    if (binding[drop]) binding[drop]();
    const text = `init ${created.outcome || (created.error && created.error.outcome) || "failed"}: ${created.text || String(created.error)}`;
    throw new CaseFailure(`${escape(entry.path)}: ${escape(text)}`, null, null);
  }
  const instance = created.value;
  const answers = [];
  let answering = true;
  try {
    for (const step of kase.steps) {
      if (READ_OUTS.has(step.cmd) && !binding.commands.includes(step.cmd)) { // never sent, as in `kpurgatory check`
        answers.push(null);
        continue;
      }
      if (contract && step.cmd === "watch" && step.args.keys.length && !(step.expect && "deadline_ms" in step.expect)) {
        return { skip: "a watch without expect.deadline_ms (a tree older than its contract aids): the contract level "
          + "cannot judge it; make the tree again with `kpurgatory vectors DIR`" };
      }
      const answer = await call(instance, events, step);
      if (answer.failure !== undefined) {
        answering = false;
        if (binding[drop]) binding[drop]();
      }
      answers.push(answer.failure === undefined ? answer : { failure: answer.failure });
      let wrong = answer.failure !== undefined ? escape(answer.failure)
        : contract ? contract.judge(step, answer) : exactDifference(step, answer);
      if (wrong) {
        const finding = step.expect && step.expect.kafka ? asKafka(step.expect.kafka, families, answer) : null;
        const observed = writeObserved(binding, entry, kase, answers, outDir);
        if (finding) wrong = `as Kafka does: ${escape(finding)} (${wrong})`;
        if (finding && binding.declarations.kafka_version) return { finding, step: step.seq, observed, reason: wrong };
        throw new CaseFailure([
          `${escape(entry.path)} failed at step ${step.seq} ${step.cmd}(${show(step.args)}) [${binding.level} level]`,
          `  ${wrong}`,
          `  model: result ${show(step.result)}, events ${show(step.events)}${step.error ? `, error ${show(step.error)}` : ""}`,
          `  observed: ${show(answers[answers.length - 1])}`,
          `  observed run: ${escape(observed)}`,
          `  replay it: kpurgatory replay ${escape(observed)} --level ${binding.level}`,
        ].join("\n"), step.seq, observed, finding);
      }
      if (contract && !contract.judging) break; // an input the declarations leave undefined: nothing after it is judged
    }
  } finally {
    if (answering && instance.close) await within("close", () => instance.close());
  }
  return {};
}

// The fields a binding may leave out, as they are then: a Kafka-like timer, judged exactly.
const TIMER = { level: "exact", declarations: {}, profiles: ["timer"],
  commands: ["timer_add", "timer_cancel", "advance", "size", "shutdown"] };

// Why a run in which no case ran fails (specs/vectors.md §3): the skips counted by reason, and the tree to make.
function noCaseRan(index, binding, verdicts) {
  if (!verdicts.length) return "no case ran: the tree has no cases";
  const counts = new Map();
  for (const { reason } of verdicts) counts.set(reason, (counts.get(reason) || 0) + 1);
  const tree = index.kafka_version ?? null, declared = binding.declarations.kafka_version ?? null;
  return `no case ran: all ${verdicts.length} were skipped (${[...counts].map(([why, n]) => `${n}: ${why}`).join("; ")})`
    + (tree === declared ? "" : declared === null
      ? `; the tree is Kafka ${tree}'s, the binding current Kafka's: make a tree for it with \`kpurgatory vectors DIR\``
      : `; the binding follows Kafka ${declared}: make a tree for it with \`kpurgatory vectors DIR --kafka-version ${declared}\``);
}

// Registers one node:test test per case of the tree KPURGATORY_VECTORS names, run against the binding: an object, a
// function returning one, or the path (or file URL) of a module exporting either, which then runs in a worker
// thread; writes the results file KPURGATORY_VECTORS_RESULTS names, if any, after them.
async function run(bindingOrFactory) {
  const binding = typeof bindingOrFactory === "string" || bindingOrFactory instanceof URL
    ? await require("./isolated.js")(bindingOrFactory)
    : typeof bindingOrFactory === "function" ? bindingOrFactory() : bindingOrFactory;
  if (binding.open) { // the stdio binding learns its profiles and declarations from hello
    const opened = await within("hello", () => binding.open());
    if (!("value" in opened)) throw new Error(`the binding could not be opened: ${opened.text || String(opened.error)}`);
  }
  for (const [field, value] of Object.entries(TIMER)) binding[field] ??= structuredClone(value);
  const root = process.env.KPURGATORY_VECTORS;
  const index = readTree(root);
  const families = index.families || [];
  const outDir = process.env.KPURGATORY_VECTORS_OUT || path.resolve("target", "kpurgatory");
  const verdicts = [];
  after(() => {
    if (binding.close) binding.close();
    const file = process.env.KPURGATORY_VECTORS_RESULTS;
    if (!file) return;
    fs.writeFileSync(file, `${toJson({ format: "kpurgatory-vector-results", version: 1, driver: "javascript",
      implementation: binding.name, level: binding.level, declarations: binding.declarations, cases: verdicts })}\n`);
  });
  for (const entry of index.cases) {
    const reason = whySkip(binding, entry);
    const verdict = { path: entry.path, verdict: "pass", reason: null, step: null, observed: null };
    verdicts.push(verdict);
    if (reason) {
      Object.assign(verdict, { verdict: "skip", reason });
      test(escape(entry.path), { skip: escape(reason) }, () => {});
      continue;
    }
    test(escape(entry.path), async (t) => {
      try {
        const { skip, finding, step, observed, reason: why } = await runCase(binding, families, root, entry, outDir);
        if (skip) {
          Object.assign(verdict, { verdict: "skip", reason: skip });
          t.skip(escape(skip));
        } else if (finding) {
          Object.assign(verdict, { reason: why, finding, step, observed });
          t.diagnostic(`${why}: passes, the binding follows Kafka ${binding.declarations.kafka_version}`);
        }
      } catch (error) {
        const failure = error instanceof CaseFailure
          ? { reason: error.message.split("\n")[error.step === null ? 0 : 1].trim(), step: error.step,
            observed: error.observed, ...(error.finding ? { finding: error.finding } : {}) }
          : { reason: escape(error.stack || error) }; // the driver broke, not a judged step
        Object.assign(verdict, { verdict: "fail", ...failure });
        throw error;
      }
    });
  }
  if (verdicts.every(({ verdict }) => verdict === "skip")) {
    const why = noCaseRan(index, binding, verdicts);
    test("no case ran", () => { throw new Error(why); });
  }
}

module.exports = { run, drop, escape, parseJson, toJson };
