// One node:test test per vector case, against the binding KPURGATORY_BINDING names (README.md).
//   KPURGATORY_VECTORS=DIR KPURGATORY_BINDING=stdio KPURGATORY_ADAPTER="..." node --test
import { after, test } from "node:test";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { readTree, whySkip, runCase, CaseFailure, escape, toJson } = require("./driver.js");

// The bindings that ship with kpurgatory, by name; anything else is a path to a binding module.
const BINDINGS = {
  "stdio": "./stdio.js",
  "node-timer": "../../node-timer/binding.js",
  "npm-timer-wheel": "../../pypi/npm-timer-wheel/binding.js",
};
const name = process.env.KPURGATORY_BINDING || "stdio";
const exported = require(BINDINGS[name] || path.resolve(name));
const binding = typeof exported === "function" ? exported() : exported;
const root = process.env.KPURGATORY_VECTORS;
const index = readTree(root);
const outDir = process.env.KPURGATORY_VECTORS_OUT || path.resolve("target", "kpurgatory");
if (binding.open) await binding.open();

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
  test(escape(entry.path), async () => {
    try {
      await runCase(binding, root, entry, outDir);
    } catch (error) {
      const failure = error instanceof CaseFailure
        ? { reason: error.message, step: error.step, observed: error.observed }
        : { reason: escape(error.stack || error) }; // the binding or the driver broke, not a judged step
      Object.assign(verdict, { verdict: "fail", ...failure });
      throw error;
    }
  });
}
