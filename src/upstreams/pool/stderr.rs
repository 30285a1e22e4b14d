//! Logging what a stdio upstream writes to stderr, bounded: each line is redacted whole (its first
//! [`WINDOW`] bytes, so a secret is never split by a cut) and then cut to [`MAX_LINE`], the rest
//! of a longer line discarded; at most [`LINES_PER_SECOND`] lines a second per process (after a
//! burst), with a line saying how many were dropped instead.

use std::time::Duration;

use futures::StreamExt;
use tokio::io::AsyncRead;
use tokio_util::bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, FramedRead};

use crate::domain::Principal;
use crate::rate_limit::Throttle;
use crate::tools::Redactor;

/// Longest stderr line logged whole (UTF-8 bytes).
const MAX_LINE: usize = 4096;
/// How much of a line is read and redacted before it is cut to [`MAX_LINE`]: a secret of up to
/// `WINDOW - MAX_LINE` bytes that starts in the logged part is redacted whole.
const WINDOW: usize = 4 * MAX_LINE;
/// Lines logged per process and second, on average.
const LINES_PER_SECOND: u32 = 20;
/// Lines logged at once after a quiet spell.
const BURST: u32 = 100;
/// How often, at most, the count of dropped lines is logged while lines are dropped.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Logs what a stdio upstream writes to stderr, line by line, with the user's secrets redacted,
/// until the process closes it.
pub(super) async fn log(
    stderr: impl AsyncRead + Unpin,
    redactor: Redactor,
    upstream: String,
    principal: Option<Principal>,
) {
    let mut lines = FramedRead::new(stderr, Lines::default());
    let mut limiter = Throttle::per_second(LINES_PER_SECOND, BURST);
    let mut dropped: u64 = 0;
    let report = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(report);
    loop {
        tokio::select! {
            line = lines.next() => {
                let Some(Ok(line)) = line else { break };
                if limiter.check().is_ok() {
                    line.log(&redactor, &upstream, principal.as_ref());
                } else {
                    if dropped == 0 {
                        report.as_mut().reset(tokio::time::Instant::now() + REPORT_EVERY);
                    }
                    dropped += 1;
                }
            }
            () = &mut report, if dropped > 0 => {
                report_dropped(&mut dropped, &upstream, principal.as_ref());
            }
        }
    }
    if dropped > 0 {
        report_dropped(&mut dropped, &upstream, principal.as_ref());
    }
}

fn report_dropped(dropped: &mut u64, upstream: &str, principal: Option<&Principal>) {
    tracing::warn!(%upstream, ?principal, dropped = *dropped, per_second = LINES_PER_SECOND, "upstream process wrote more lines to stderr than are logged; dropped some");
    *dropped = 0;
}

/// One line of stderr, without its line break: at most its first [`WINDOW`] bytes, and how many
/// bytes after them were discarded.
struct Line {
    start: Vec<u8>,
    discarded: usize,
}

impl Line {
    /// Logs the line redacted, then cut to [`MAX_LINE`] (saying how long it was when cut).
    fn log(&self, redactor: &Redactor, upstream: &str, principal: Option<&Principal>) {
        let text = String::from_utf8_lossy(&self.start);
        let redacted = redactor.text(text.trim_end());
        if redacted.len() <= MAX_LINE && self.discarded == 0 {
            tracing::info!(%upstream, ?principal, stderr = %redacted, "upstream process wrote to stderr");
        } else {
            let shown = crate::text::bounded(&redacted, MAX_LINE);
            let line_bytes = self.start.len() + self.discarded;
            tracing::info!(%upstream, ?principal, stderr = %shown, line_bytes, "upstream process wrote a long line to stderr; logged its start");
        }
    }
}

/// Splits stderr into [`Line`]s, holding at most a window of a line (and what one read brings).
#[derive(Default)]
struct Lines {
    /// The start of a line longer than the window, whose rest is being discarded.
    long: Option<Line>,
}

impl Decoder for Lines {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, std::io::Error> {
        let newline = buf.iter().position(|&b| b == b'\n');
        if let Some(long) = &mut self.long {
            return Ok(match newline {
                Some(end) => {
                    long.discarded += end;
                    buf.advance(end + 1);
                    self.long.take()
                }
                None => {
                    long.discarded += buf.len();
                    buf.clear();
                    None
                }
            });
        }
        match newline {
            Some(end) if end <= WINDOW => {
                let line = buf.split_to(end + 1);
                Ok(Some(Line {
                    start: line[..end].to_vec(),
                    discarded: 0,
                }))
            }
            None if buf.len() <= WINDOW => Ok(None),
            _ => {
                self.long = Some(Line {
                    start: buf.split_to(WINDOW).to_vec(),
                    discarded: 0,
                });
                self.decode(buf)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, std::io::Error> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        if buf.is_empty() {
            return Ok(self.long.take());
        }
        let start = buf.split().to_vec();
        Ok(Some(Line { start, discarded: 0 }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `input`, delivered a thousand bytes at a time, as (start, discarded).
    fn lines(input: &[u8]) -> Vec<(Vec<u8>, usize)> {
        let mut codec = Lines::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in input.chunks(1000) {
            buf.extend_from_slice(piece);
            while let Some(line) = codec.decode(&mut buf).expect("decode") {
                out.push((line.start, line.discarded));
            }
        }
        while let Some(line) = codec.decode_eof(&mut buf).expect("decode") {
            out.push((line.start, line.discarded));
        }
        out
    }

    #[test]
    fn a_line_is_kept_up_to_the_window_and_the_rest_counted() {
        let mut input = b"short\n".to_vec();
        input.extend(vec![b'a'; WINDOW]);
        input.extend(b"\n");
        input.extend(vec![b'b'; WINDOW + 5000]);
        input.extend(b"\nlast without a break");
        assert_eq!(
            lines(&input),
            [
                (b"short".to_vec(), 0),
                (vec![b'a'; WINDOW], 0),
                (vec![b'b'; WINDOW], 5000),
                (b"last without a break".to_vec(), 0),
            ]
        );
    }

    #[test]
    fn a_long_line_cut_by_the_end_of_the_stream_keeps_its_start() {
        assert_eq!(lines(&vec![b'c'; WINDOW + 10]), [(vec![b'c'; WINDOW], 10)]);
    }
}
