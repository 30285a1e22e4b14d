// Loaded with `node --import`. Node 20 lacks fs.globSync (added in Node 22), and the conformance
// CLI (ESM) does `import { existsSync, globSync, ... } from "fs"`, which fails at link time
// ("does not provide an export named 'globSync'"), even for --help.
// A `--require` preload that assigns fs.globSync does NOT work: Node fixes the named exports of
// the builtin's ESM facade the first time fs is loaded, before the preload can add the property.
// So we redirect the CLI's "fs" import to fs-shim.mjs (node:fs + glob's globSync).
// Harmless on Node >= 22. Needs module.register (Node >= 18.19 / 20.6).
import { register } from 'node:module';
register('./globsync-hooks.mjs', import.meta.url);
