//! Where the program's logs go and what they hold: stderr, text or JSON, at the levels of
//! `RUST_LOG` (INFO by default, rmcp's own lines at ERROR), in colour only on a terminal and
//! never with `NO_COLOR` set. The environment is read here, once, as logging starts.

use std::ffi::OsStr;
use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, TelemetryConfig};
use crate::telemetry::Telemetry;

/// Logs to stderr in `format`.
pub(super) fn init(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_ansi(colour())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Logs as [`init`] does, and the spans exported by [`Telemetry`].
pub(super) fn init_with_traces(
    format: LogFormat,
    config: &TelemetryConfig,
    endpoint: &url::Url,
) -> anyhow::Result<Telemetry> {
    let filter = log_filter();
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(colour())
        .with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.with_filter(filter).boxed(),
        LogFormat::Json => logs.json().with_filter(filter).boxed(),
    };
    let http = crate::outbound::client().context("cannot build the HTTP client that exports traces")?;
    let (telemetry, traces) = Telemetry::start(config, endpoint, http)
        .with_context(|| format!("cannot export traces to {endpoint} (telemetry.otlp_endpoint)"))?;
    tracing_subscriber::registry().with(logs).with(traces).init();
    Ok(telemetry)
}

/// Whether the log lines on stderr are coloured, from the process's own stderr and environment.
fn colour() -> bool {
    use_colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref())
}

/// Colour (ANSI escapes) only for a person reading a terminal: never into a file, a pipe or a
/// journal, and never when `NO_COLOR` is set to anything but the empty string (no-color.org).
pub fn use_colour(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// What is logged: `RUST_LOG`, INFO by default.
fn log_filter() -> EnvFilter {
    log_filter_of(std::env::var("RUST_LOG").ok().as_deref())
}

/// The log filter of `spec` (`RUST_LOG`'s syntax; INFO when absent or unreadable). rmcp logs at
/// ERROR unless `spec` names it: its DEBUG and TRACE lines print whole protocol messages (an
/// upstream's with whatever secret it echoes, unredacted), and its warnings are dumps of the
/// messages it answered with an error, which gatehouse reports in words of its own where they
/// matter (an upstream's `roots/list` outside any call, say).
pub fn log_filter_of(spec: Option<&str>) -> EnvFilter {
    let filter = spec
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    if spec.is_some_and(|spec| spec.contains("rmcp")) {
        return filter;
    }
    match "rmcp=error".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(use_colour(true, None));
        assert!(!use_colour(false, None), "a file or a pipe gets no escapes");
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, Some(OsStr::new("1"))));
        assert!(use_colour(true, Some(OsStr::new(""))), "an empty NO_COLOR is unset");
    }

    #[test]
    fn rmcp_says_only_its_errors_unless_asked_for() {
        assert!(log_filter_of(None).to_string().contains("rmcp=error"));
        assert!(log_filter_of(Some("debug")).to_string().contains("rmcp=error"));
        let asked = log_filter_of(Some("info,rmcp=warn")).to_string();
        assert!(asked.contains("rmcp=warn") && !asked.contains("rmcp=error"), "{asked}");
    }
}
