// What the TypeScript interop clients (ts_elicitation.mjs, ts_stateless.mjs, ts_offers.mjs) share:
// their command line, one JSON object per stdout line, a tool result as they print it, a fetch that
// tells when the GET SSE stream answered, and running under --timeout.

import { parseArgs } from 'node:util';

/** The options --sdk, --url, --call, --args and --timeout, and `extra` ones. */
export function options(extra) {
    const { values } = parseArgs({
        options: {
            sdk: { type: 'string' },
            url: { type: 'string' },
            call: { type: 'string' },
            args: { type: 'string', default: '{}' },
            timeout: { type: 'string', default: '60' },
            ...extra
        }
    });
    return values;
}

export function emit(event) {
    console.log(JSON.stringify(event));
}

/** What a final line shows of a tool result. */
export function shown(result) {
    return { isError: Boolean(result.isError), content: result.content, structuredContent: result.structuredContent };
}

/**
 * A fetch for a transport, and a promise of the HTTP status of the first GET it made (the GET SSE
 * stream, which carries the server's notifications).
 */
export function notingGet() {
    let answered;
    const getStatus = new Promise(resolve => (answered = resolve));
    const fetchNoting = async (url, init) => {
        const response = await fetch(url, init);
        if ((init?.method ?? 'GET') === 'GET') {
            answered(response.status);
        }
        return response;
    };
    return { fetchNoting, getStatus };
}

/** Waits until the GET SSE stream of `getStatus` (see `notingGet`) answered 2xx. */
export async function streamOpened(getStatus) {
    const status = await getStatus;
    if (status < 200 || status >= 300) {
        throw new Error(`GET SSE stream not opened: HTTP ${status}`);
    }
}

/**
 * Prints the line `run` returns and exits 0; on an error, or when `opts.timeout` seconds pass
 * first, prints `failed(reason)` on stderr and exits 1. The options in `required` must be given.
 */
export async function main(opts, run, failed, required = ['sdk', 'url', 'call']) {
    const timeout = setTimeout(() => {
        console.error(failed(`no answer within ${opts.timeout}s`));
        process.exit(1);
    }, Number(opts.timeout) * 1000);
    try {
        const missing = required.filter(name => !opts[name]);
        if (missing.length > 0) {
            throw new Error(`${missing.map(name => `--${name}`).join(', ')} required`);
        }
        emit(await run());
        clearTimeout(timeout);
    } catch (error) {
        console.error(failed(error?.stack ?? error));
        process.exit(1);
    }
}
