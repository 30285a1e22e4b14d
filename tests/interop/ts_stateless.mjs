// A gated call through the official TypeScript MCP SDK v2 client (@modelcontextprotocol/client
// 2.4.x) on protocol 2026-07-28, where a request that needs the user answers `input_required`.
//
// The Rust integration tests run this as a subprocess. It connects to --url with --mode (`auto`
// sends `server/discover` first and would fall back to `initialize`; `2026-07-28` pins the
// revision: `versionNegotiation: { mode: { pin } }`), calls --call with the JSON object --args, and
// lets the SDK drive the input_required rounds (`inputRequired`, auto-fulfilment by default): the
// SDK hands each URL-mode `elicitation/create` to the handler registered for it, which prints one
// line
//   {"event": "elicitation", "mode", "url", "message"}
// and answers `accept` (the user agreed to open the link); the SDK retries with the request state,
// which the server holds until the user has finished in the browser (the test does that part over
// HTTP, on whichever replica it likes). When the call returns it prints a final line
//   {"event": "result", "protocolVersion", "result": {"isError", "content", "structuredContent"}}
//
// Every stdout line is one JSON object. Exit 0 on success, 1 with a message on stderr otherwise,
// including --timeout (seconds) running out.
//
// Usage: node ts_stateless.mjs --sdk STAGE_DIR --url http://127.0.0.1:PORT/mcp --call me
//            [--args '{}'] [--mode auto] [--timeout 60]
// where STAGE_DIR holds node_modules/@modelcontextprotocol/client (scripts/npm-stage puts it there).

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { emit, main, options, shown } from './ts_client.mjs';

const opts = options({ mode: { type: 'string', default: 'auto' } });

async function run() {
    const entry = join(opts.sdk, 'node_modules/@modelcontextprotocol/client/dist/index.mjs');
    const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(entry).href);

    const mode = opts.mode === 'auto' ? 'auto' : { pin: opts.mode };
    const client = new Client(
        { name: 'gatehouse-interop-ts-stateless', version: '1.0.0' },
        { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode } }
    );
    client.setRequestHandler('elicitation/create', async request => {
        const { mode, url, message } = request.params;
        emit({ event: 'elicitation', mode, url, message });
        return { action: 'accept' };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(opts.url)));
    const result = await client.callTool({ name: opts.call, arguments: JSON.parse(opts.args) });
    const protocolVersion = client.getNegotiatedProtocolVersion();
    await client.close();
    return { event: 'result', protocolVersion, result: shown(result) };
}

await main(opts, run, reason => `stateless TypeScript client failed: ${reason}`);
