"use strict";
// kpurgatory-vectors: run(binding) registers one node:test test per vector; stdio() is the binding of any adapter
// process speaking kpurgatory's protocol (README.md).
const { run } = require("./driver.js");
const stdio = require("./stdio.js");

module.exports = { run, stdio };
