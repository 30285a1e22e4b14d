// node:fs plus glob's globSync, which returns the same string[] of relative paths that the CLI's
// only use, globSync("**/checks.json", { cwd }), expects from Node 22's fs.globSync.
export * from 'node:fs';
export { default } from 'node:fs';
export { globSync } from 'glob';
