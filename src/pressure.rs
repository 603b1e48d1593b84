//! The machine's stall time, from Linux's pressure stall information (PSI,
//! `/proc/pressure/cpu` and `/proc/pressure/io`, Documentation/accounting/psi.rst): the
//! microseconds during which some task waited for a CPU, or for I/O. Read before and
//! after a stretch of work, the difference says whether a slow stretch waited on the
//! machine rather than on its own work (the policy pass logs it with each transaction
//! over 50 ms, docs/benchmarks.md).

/// A reading of both totals, us since boot; `None` where the kernel has no PSI (built
/// without it, or booted with `psi=0`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pressure {
    /// `some ... total=` of `/proc/pressure/cpu`: time some runnable task waited for a CPU.
    pub cpu_us: Option<u64>,
    /// `some ... total=` of `/proc/pressure/io`: time some task waited for I/O.
    pub io_us: Option<u64>,
}

impl Pressure {
    /// Reads both totals now (two small procfs reads).
    pub fn now() -> Pressure {
        Pressure {
            cpu_us: some_total("/proc/pressure/cpu"),
            io_us: some_total("/proc/pressure/io"),
        }
    }

    /// What `later` adds to this reading: (CPU wait, I/O wait), us; `None` for a total
    /// missing from either.
    pub fn until(&self, later: &Pressure) -> (Option<u64>, Option<u64>) {
        let d = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        (d(self.cpu_us, later.cpu_us), d(self.io_us, later.io_us))
    }
}

/// The `total=` of the `some` line of a PSI file.
fn some_total(path: &str) -> Option<u64> {
    parse_some_total(&std::fs::read_to_string(path).ok()?)
}

/// The `total=` of the `some` line of PSI text: `some avg10=0.00 avg60=0.00 avg300=0.00
/// total=1234`.
fn parse_some_total(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_some_lines_total_is_read() {
        let text = "some avg10=0.03 avg60=2.62 avg300=5.42 total=1469027981\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_some_total(text), Some(1_469_027_981));
        assert_eq!(parse_some_total("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_some_total(""), None);
        let a = Pressure {
            cpu_us: Some(10),
            io_us: None,
        };
        let b = Pressure {
            cpu_us: Some(25),
            io_us: Some(3),
        };
        assert_eq!(a.until(&b), (Some(15), None));
    }
}
