//! Property tests, issue 9's fuzzing set: the JSON-RPC parser, the URL, header and body template
//! renderer, form validation and the OAuth callback's query parsing, fed generated and hostile
//! input. None may panic, what they produce stays within a bound of what they were given, and a
//! rendered URL keeps its template's origin and path.
//!
//! proptest on stable Rust stands in for cargo fuzz (which needs nightly). Each property runs
//! PROPTEST_CASES cases (proptest's default, 256, when unset); .ci/run runs this file again with
//! more. A failure prints the minimal failing input; the seed of one that was found and fixed is
//! kept in tests/proptest-regressions/ and replayed first on every run.

mod callback;
mod forms;
mod jsonrpc;
mod strategies;
mod template;
