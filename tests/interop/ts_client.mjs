// What the TypeScript interop clients (ts_elicitation.mjs, ts_stateless.mjs) share: their command
// line, one JSON object per stdout line, a tool result as they print it, and running under
// --timeout.

import { parseArgs } from 'node:util';

/** The options --sdk, --url and --call (all required), --args and --timeout, and `extra` ones. */
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
 * Prints the line `run` returns and exits 0; on an error, or when `opts.timeout` seconds pass
 * first, prints `failed(reason)` on stderr and exits 1.
 */
export async function main(opts, run, failed) {
    const timeout = setTimeout(() => {
        console.error(failed(`no answer within ${opts.timeout}s`));
        process.exit(1);
    }, Number(opts.timeout) * 1000);
    try {
        if (!opts.sdk || !opts.url || !opts.call) {
            throw new Error('--sdk, --url and --call are required');
        }
        emit(await run());
        clearTimeout(timeout);
    } catch (error) {
        console.error(failed(error?.stack ?? error));
        process.exit(1);
    }
}
