//! CPU time per call: how much of each measured call gatehouse, the load generator and the rest
//! of the machine spent, read from `/proc` around a run (for the sections that compare work, not
//! only rates, on a machine whose cores the load generator shares).

use super::LoadResult;

/// CPU time used so far, in microseconds: by gatehouse, by this process, by the whole machine.
pub(super) struct Cpu {
    pub(super) gatehouse: Option<u64>,
    pub(super) bench: Option<u64>,
    pub(super) machine: Option<u64>,
}

/// CPU microseconds per successful call.
pub(super) struct PerCall {
    pub(super) gatehouse: Option<f64>,
    pub(super) bench: Option<f64>,
    pub(super) machine: Option<f64>,
}

impl Cpu {
    pub(super) fn read(gatehouse: Option<u32>) -> Self {
        Self {
            gatehouse: gatehouse.and_then(|pid| process_micros(&format!("/proc/{pid}/stat"))),
            bench: process_micros("/proc/self/stat"),
            machine: machine_micros(),
        }
    }

    /// As [`Cpu::read`], with the proxy's CPU summed over `root` and every process below it (a
    /// peer started by a script, or one that runs several workers).
    pub(super) fn read_tree(root: u32) -> Self {
        let tree = process_tree(root);
        Self {
            gatehouse: Some(
                tree.iter()
                    .filter_map(|pid| process_micros(&format!("/proc/{pid}/stat")))
                    .sum(),
            ),
            ..Self::read(None)
        }
    }

    pub(super) fn per_call(&self, after: &Cpu, result: &LoadResult) -> PerCall {
        let used = |before: Option<u64>, after: Option<u64>| {
            let used = after?.checked_sub(before?)?;
            (result.all_calls > 0).then(|| used as f64 / result.all_calls as f64)
        };
        PerCall {
            gatehouse: used(self.gatehouse, after.gatehouse),
            bench: used(self.bench, after.bench),
            machine: used(self.machine, after.machine),
        }
    }
}

fn clock_ticks() -> Option<u64> {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0)
}

/// CPU time (user + system) of the process whose `stat` file this is.
fn process_micros(stat: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(stat).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces: state is
    // field 3, utime 14 and stime 15.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 1_000_000 / clock_ticks()?)
}

/// `root` and its descendants, from every process's parent in `/proc/PID/stat`.
pub(super) fn process_tree(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the parenthesised command name: state, then the parent's pid.
            let parent = stat
                .get(stat.rfind(')')? + 1..)?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, parent))
        })
        .collect();
    let mut tree = vec![root];
    let mut next = 0;
    while let Some(&pid) = tree.get(next) {
        tree.extend(
            parents
                .iter()
                .filter(|(_, parent)| *parent == pid)
                .map(|(child, _)| *child),
        );
        next += 1;
    }
    tree
}

/// CPU time all cores spent busy (neither idle nor waiting for I/O), from `/proc/stat`.
fn machine_micros() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let times: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is within user already).
    let busy: u64 = times
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Some(busy * 1_000_000 / clock_ticks()?)
}

/// A table row: rate, latency, errors and CPU per call.
pub(super) fn row(name: &str, result: &LoadResult, cpu: &PerCall) {
    let micros = |cpu: Option<f64>| cpu.map_or_else(|| "n/a".to_owned(), |c| format!("{c:.0} µs"));
    let rest = match (cpu.machine, cpu.gatehouse.unwrap_or(0.0), cpu.bench) {
        (Some(machine), gatehouse, Some(bench)) => Some((machine - gatehouse - bench).max(0.0)),
        _ => None,
    };
    println!(
        "| {name} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {} | {} |",
        result.calls as f64 / result.seconds,
        result.p50_ms,
        result.p99_ms,
        result.calls,
        result.errors,
        micros(cpu.gatehouse),
        micros(cpu.bench),
        micros(rest)
    );
}
