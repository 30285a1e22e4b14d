// URL-mode elicitation on protocol 2025-11-25 with the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk 1.32.x), the counterpart of python_elicitation.py.
//
// The Rust integration tests run this as a subprocess. It connects to --url declaring
// {"elicitation": {"url": {}}} (with HTTP basic auth on every request when --basic-auth is given,
// through the transport's requestInit headers), waits until the GET SSE stream answered, calls
// --call with the JSON object --args, which must fail with -32042 (the SDK's
// UrlElicitationRequiredError), and prints per listed elicitation one line
//   {"event": "elicitation", "elicitationId", "url", "message"}
// Then it waits for a notifications/elicitation/complete for each of them, printing
//   {"event": "completed", "elicitationId"}
// in arrival order, retries the call, ends the session (DELETE) and prints a final line
//   {"event": "result", "result": {"isError", "content", "structuredContent"}}
//
// Every stdout line is one JSON object. Exit 0 on success, 1 with a message on stderr otherwise,
// including --timeout (seconds) running out.
//
// Usage: node ts_elicitation.mjs --sdk STAGE_DIR --url http://127.0.0.1:PORT/mcp --call me
//            [--args '{}'] [--basic-auth USER:PASSWORD] [--user NAME] [--timeout 60]
// (--user NAME: X-Forwarded-User on every request, gatehouse's header identity)
// where STAGE_DIR holds node_modules/@modelcontextprotocol/sdk (scripts/npm-stage puts it there).

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { emit, main, notingGet, options, shown, streamOpened } from './ts_client.mjs';

const opts = options({ 'basic-auth': { type: 'string' }, user: { type: 'string' } });

let phase = 'starting';

async function run() {
    const sdk = path => import(pathToFileURL(join(opts.sdk, 'node_modules/@modelcontextprotocol/sdk/dist/esm', path)).href);
    const { Client } = await sdk('client/index.js');
    const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
    const { ElicitationCompleteNotificationSchema, ErrorCode } = await sdk('types.js');

    const headers = {};
    if (opts['basic-auth'] !== undefined) {
        headers.Authorization = `Basic ${Buffer.from(opts['basic-auth']).toString('base64')}`;
    }
    if (opts.user !== undefined) {
        headers['X-Forwarded-User'] = opts.user;
    }
    // The GET SSE stream carries the completion notifications: note when it answers.
    const { fetchNoting, getStatus } = notingGet();

    // Completions in arrival order; a waiter is woken by the next one.
    const completed = [];
    let wake = () => {};
    const client = new Client(
        { name: 'gatehouse-interop-ts-elicitation', version: '1.0.0' },
        { capabilities: { elicitation: { url: {} } } }
    );
    client.setNotificationHandler(ElicitationCompleteNotificationSchema, notification => {
        completed.push(notification.params.elicitationId);
        wake();
    });
    const transport = new StreamableHTTPClientTransport(new URL(opts.url), {
        requestInit: { headers },
        fetch: fetchNoting
    });
    phase = 'initializing';
    await client.connect(transport);
    phase = 'waiting for the GET SSE stream';
    await streamOpened(getStatus);

    phase = `calling ${opts.call} (expecting -32042)`;
    const call = () => client.callTool({ name: opts.call, arguments: JSON.parse(opts.args) });
    let elicitations;
    try {
        const first = await call();
        throw new Error(`expected error -32042, but the call succeeded: ${JSON.stringify(first)}`);
    } catch (error) {
        if (error?.code !== ErrorCode.UrlElicitationRequired) {
            throw error;
        }
        elicitations = error.elicitations;
    }
    if (!Array.isArray(elicitations) || elicitations.length === 0) {
        throw new Error('-32042 without data.elicitations');
    }
    for (const { elicitationId, url, message } of elicitations) {
        emit({ event: 'elicitation', elicitationId, url, message });
    }

    const pending = new Set(elicitations.map(e => e.elicitationId));
    phase = 'waiting for completion';
    while (pending.size > 0) {
        const next = completed.shift();
        if (next === undefined) {
            await new Promise(resolve => (wake = resolve));
        } else if (pending.delete(next)) {
            emit({ event: 'completed', elicitationId: next });
        }
    }

    phase = `retrying ${opts.call}`;
    const result = await call();
    phase = 'closing the session';
    await transport.terminateSession();
    await client.close();
    return { event: 'result', result: shown(result) };
}

await main(opts, run, reason => `TypeScript elicitation client failed while ${phase}: ${reason}`);
