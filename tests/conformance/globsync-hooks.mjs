// Resolve hook: only the conformance CLI's own `fs` imports go to the shim.
const SHIM = new URL('./fs-shim.mjs', import.meta.url).href;
export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') &&
      context.parentURL && context.parentURL.includes('/@modelcontextprotocol/conformance/dist/')) {
    return { url: SHIM, shortCircuit: true };
  }
  return next(specifier, context);
}
