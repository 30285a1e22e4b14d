// MCP authorization with the official TypeScript MCP SDK (@modelcontextprotocol/sdk 1.32.x), no
// human involved.
//
// The Rust integration tests run this against gatehouse in `[identity] mode = "oauth"` and a fake
// identity provider that consents at once for the user a test signed in. The SDK does MCP
// authorization itself through an `OAuthClientProvider` kept in memory: the 401 challenge,
// Protected Resource Metadata (RFC 9728), authorization server metadata (RFC 8414), dynamic client
// registration (RFC 7591, as a public client), PKCE and the token request with `resource`
// (RFC 8707). Only the browser is replaced: `redirectToAuthorization` fetches the authorization URL
// without following the redirect and keeps the `code` of its `Location`. The flow is the SDK's
// documented one: connect -> UnauthorizedError -> transport.finishAuth(code) -> connect again (on a
// new transport, as the SDK's example client does); then list tools and call --call.
//
// Prints ONE JSON object on stdout:
//   {"protocolVersion", "tools", "result": {...}, "authorization": {"resource", "scope"}}
// where `authorization` is what the SDK put in its authorization request. The session is left open
// (close() sends no DELETE) so the test can see what gatehouse stored for it. Exit 0 on success,
// 1 with a message on stderr otherwise.
//
// Usage: node ts_oauth.mjs --sdk STAGE_DIR --url http://127.0.0.1:PORT/mcp [--call whoami] [--timeout 30]
// where STAGE_DIR holds node_modules/@modelcontextprotocol/sdk (scripts/npm-stage puts it there).

import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const NAME = 'gatehouse-interop-ts-oauth';
// Nothing listens here: the redirect to it is read, never followed.
const REDIRECT_URI = 'http://127.0.0.1:1/callback';
const MAX_PAGES = 1000;

const { values: opts } = parseArgs({
    options: {
        sdk: { type: 'string' },
        url: { type: 'string' },
        call: { type: 'string', default: 'whoami' },
        timeout: { type: 'string', default: '30' }
    }
});

/** An in-memory `OAuthClientProvider` whose "browser" reads the authorization redirect. */
class MemoryProvider {
    /** The parameters of the authorization request the SDK made. */
    authorization = undefined;
    /** The code the authorization server redirected back with. */
    code = undefined;
    #client = undefined;
    #tokens = undefined;
    #verifier = undefined;
    #state = undefined;

    get redirectUrl() {
        return REDIRECT_URI;
    }

    get clientMetadata() {
        return {
            client_name: NAME,
            redirect_uris: [REDIRECT_URI],
            grant_types: ['authorization_code', 'refresh_token'],
            response_types: ['code'],
            token_endpoint_auth_method: 'none'
        };
    }

    state() {
        this.#state = randomBytes(16).toString('base64url');
        return this.#state;
    }

    clientInformation() {
        return this.#client;
    }

    saveClientInformation(information) {
        this.#client = information;
    }

    tokens() {
        return this.#tokens;
    }

    saveTokens(tokens) {
        this.#tokens = tokens;
    }

    saveCodeVerifier(verifier) {
        this.#verifier = verifier;
    }

    codeVerifier() {
        if (!this.#verifier) {
            throw new Error('no PKCE code verifier was saved');
        }
        return this.#verifier;
    }

    async redirectToAuthorization(authorizationUrl) {
        this.authorization = authorizationUrl.searchParams;
        const response = await fetch(authorizationUrl, { redirect: 'manual', signal: AbortSignal.timeout(10_000) });
        const location = response.headers.get('location');
        if (![302, 303].includes(response.status) || !location) {
            throw new Error(`authorization answered ${response.status}, not a redirect: ${await response.text()}`);
        }
        const answer = new URL(location).searchParams;
        if (answer.has('error')) {
            throw new Error(`authorization refused: ${answer}`);
        }
        if (answer.get('state') !== this.#state) {
            throw new Error(`authorization redirect carries state ${answer.get('state')}, not ${this.#state}`);
        }
        this.code = answer.get('code');
    }
}

async function listAllTools(client) {
    const names = [];
    let cursor;
    for (let page = 0; page < MAX_PAGES; page++) {
        const result = await client.listTools(cursor === undefined ? undefined : { cursor });
        names.push(...result.tools.map(tool => tool.name));
        cursor = result.nextCursor;
        if (!cursor) {
            return names;
        }
    }
    throw new Error(`tools/list did not finish within ${MAX_PAGES} pages`);
}

async function run() {
    if (!opts.sdk || !opts.url) {
        throw new Error('--sdk and --url are required');
    }
    const sdk = path => import(pathToFileURL(join(opts.sdk, 'node_modules/@modelcontextprotocol/sdk/dist/esm', path)).href);
    const { Client } = await sdk('client/index.js');
    const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
    const { UnauthorizedError } = await sdk('client/auth.js');

    const url = new URL(opts.url);
    const provider = new MemoryProvider();
    const info = { name: NAME, version: '1.0.0' };

    const unauthorized = new StreamableHTTPClientTransport(url, { authProvider: provider });
    try {
        await new Client(info).connect(unauthorized);
        throw new Error('connected without authorization');
    } catch (error) {
        if (!(error instanceof UnauthorizedError)) {
            throw error;
        }
    }
    if (!provider.code) {
        throw new Error('UnauthorizedError without a visit to the authorization endpoint');
    }
    await unauthorized.finishAuth(provider.code);

    const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
    const client = new Client(info);
    await client.connect(transport);
    const tools = await listAllTools(client);
    const result = await client.callTool({ name: opts.call, arguments: {} });
    await client.close();
    return {
        protocolVersion: transport.protocolVersion,
        tools,
        result: { isError: Boolean(result.isError), content: result.content, structuredContent: result.structuredContent },
        authorization: { resource: provider.authorization.get('resource'), scope: provider.authorization.get('scope') }
    };
}

const timeout = setTimeout(() => {
    console.error(`OAuth interop client failed: no answer within ${opts.timeout}s`);
    process.exit(1);
}, Number(opts.timeout) * 1000);
try {
    console.log(JSON.stringify(await run()));
    clearTimeout(timeout);
} catch (error) {
    console.error(`OAuth interop client failed: ${error?.stack ?? error}`);
    process.exit(1);
}
