// Resources, prompts and completions through gatehouse with the official TypeScript MCP SDK, the
// counterpart of python_offers.py: the v1 package (@modelcontextprotocol/sdk 1.32.x) on protocol
// 2025-11-25, or the v2 client (@modelcontextprotocol/client 2.4.x) on the revision --mode pins
// (`versionNegotiation: { mode: { pin } }`, default 2026-07-28; `auto` discovers), whichever of
// the two the stage directory --sdk holds.
//
// The Rust integration tests run this as a subprocess. It connects to --url, then:
//   1. lists resources, resource templates and prompts (as the server describes them),
//   2. reads --read URI (repeatable),
//   3. gets --prompt NAME with the JSON object --args as its arguments,
//   4. completes --complete-argument NAME=VALUE of --complete-prompt NAME,
//   5. (v1 only) with --subscribe URI: once the GET SSE stream answered, subscribes to URI, calls
//      the tool --call without arguments (which makes the server send updates) and waits for the first
//      notifications/resources/updated,
// ends the session and prints ONE JSON object on stdout:
//   {"package", "protocolVersion", "resources", "templates", "prompts", "read": [contents...],
//    "prompt": {...}, "completion": [values], "updated": {params of the update}}
// (the parts not asked for are null).
//
// Exit 0 on success, 1 with a message on stderr otherwise, including --timeout (seconds) running
// out before everything, the update included, arrived.
//
// Usage: node ts_offers.mjs --sdk STAGE_DIR --url http://127.0.0.1:PORT/mcp [--mode 2026-07-28]
//            [--read URI]... [--prompt NAME --args '{"city": "Paris"}']
//            [--complete-prompt NAME --complete-argument NAME=VALUE]
//            [--subscribe URI --call TOOL] [--timeout 60]
// where STAGE_DIR holds node_modules/@modelcontextprotocol/sdk or .../client (scripts/npm-stage
// puts them there).

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { main, notingGet, options, streamOpened } from './ts_client.mjs';

const opts = options({
    mode: { type: 'string', default: '2026-07-28' },
    read: { type: 'string', multiple: true, default: [] },
    prompt: { type: 'string' },
    'complete-prompt': { type: 'string' },
    'complete-argument': { type: 'string', default: '=' },
    subscribe: { type: 'string' }
});

let phase = 'starting';

const clientInfo = { name: 'gatehouse-interop-ts-offers', version: '1.0.0' };

/** The v1 SDK: a client on 2025-11-25 whose `onUpdated` handler gets resource updates. */
async function v1(onUpdated, fetchNoting) {
    const sdk = path => import(pathToFileURL(join(opts.sdk, 'node_modules/@modelcontextprotocol/sdk/dist/esm', path)).href);
    const { Client } = await sdk('client/index.js');
    const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
    const { ResourceUpdatedNotificationSchema } = await sdk('types.js');
    const client = new Client(clientInfo);
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, onUpdated);
    const transport = new StreamableHTTPClientTransport(new URL(opts.url), { fetch: fetchNoting });
    await client.connect(transport);
    return {
        name: '@modelcontextprotocol/sdk',
        client,
        protocolVersion: () => transport.protocolVersion,
        close: async () => {
            await transport.terminateSession();
            await client.close();
        }
    };
}

/** The v2 client, on the revision --mode asks for. */
async function v2() {
    const entry = join(opts.sdk, 'node_modules/@modelcontextprotocol/client/dist/index.mjs');
    const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(entry).href);
    const mode = opts.mode === 'auto' ? 'auto' : { pin: opts.mode };
    const client = new Client(clientInfo, { versionNegotiation: { mode } });
    await client.connect(new StreamableHTTPClientTransport(new URL(opts.url)));
    return {
        name: '@modelcontextprotocol/client',
        client,
        protocolVersion: () => client.getNegotiatedProtocolVersion(),
        close: () => client.close()
    };
}

async function run() {
    const isV2 = existsSync(join(opts.sdk, 'node_modules/@modelcontextprotocol/client'));
    if (opts.subscribe !== undefined && (isV2 || !opts.call)) {
        throw new Error('--subscribe needs --call and the v1 SDK');
    }
    // The first resource update, whenever it comes; a waiter is woken by it.
    let updated = null;
    let wake = () => {};
    const onUpdated = notification => {
        updated ??= notification.params;
        wake();
    };
    const { fetchNoting, getStatus } = notingGet();
    phase = 'connecting';
    const sdk = isV2 ? await v2() : await v1(onUpdated, fetchNoting);
    const { client } = sdk;

    phase = 'listing';
    const { resources } = await client.listResources();
    const templates = (await client.listResourceTemplates()).resourceTemplates;
    const { prompts } = await client.listPrompts();
    const read = [];
    for (const uri of opts.read) {
        phase = `reading ${uri}`;
        read.push(...(await client.readResource({ uri })).contents);
    }
    let prompt = null;
    if (opts.prompt !== undefined) {
        phase = `getting the prompt ${opts.prompt}`;
        prompt = await client.getPrompt({ name: opts.prompt, arguments: JSON.parse(opts.args) });
    }
    let completion = null;
    if (opts['complete-prompt'] !== undefined) {
        phase = `completing an argument of ${opts['complete-prompt']}`;
        const [name, ...value] = opts['complete-argument'].split('=');
        const completed = await client.complete({
            ref: { type: 'ref/prompt', name: opts['complete-prompt'] },
            argument: { name, value: value.join('=') }
        });
        completion = completed.completion.values;
    }
    if (opts.subscribe !== undefined) {
        phase = 'waiting for the GET SSE stream';
        await streamOpened(getStatus);
        phase = `subscribing to ${opts.subscribe}`;
        await client.subscribeResource({ uri: opts.subscribe });
        phase = `calling ${opts.call}`;
        await client.callTool({ name: opts.call, arguments: {} });
        phase = 'waiting for notifications/resources/updated';
        while (updated === null) {
            await new Promise(resolve => (wake = resolve));
        }
        await client.unsubscribeResource({ uri: opts.subscribe });
    }
    const protocolVersion = sdk.protocolVersion();
    phase = 'closing';
    await sdk.close();
    return { package: sdk.name, protocolVersion, resources, templates, prompts, read, prompt, completion, updated };
}

await main(opts, run, reason => `TypeScript offers client failed while ${phase}: ${reason}`, ['sdk', 'url']);
