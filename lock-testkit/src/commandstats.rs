//! What a server has run, per command: `INFO commandstats`, parsed.

use std::collections::BTreeMap;

/// One command's figures since the server started (or since `CONFIG RESETSTAT`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CommandStats {
    /// How many times it ran.
    pub calls: u64,
    /// Microseconds it took in all.
    pub usec: f64,
}

/// Each command's figures in the text of `INFO commandstats`, by the lower-case name
/// Redis gives it (`evalsha`, `subscribe`, `client|kill`). A figure that is missing or
/// unreadable counts as 0; lines of other sections are skipped.
#[must_use]
pub fn parse_command_stats(info: &str) -> BTreeMap<String, CommandStats> {
    info.lines()
        .filter_map(|line| {
            let (command, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
            };
            let stats = CommandStats {
                calls: field("calls").and_then(|v| v.parse().ok()).unwrap_or(0),
                usec: field("usec").and_then(|v| v.parse().ok()).unwrap_or(0.0),
            };
            Some((command.to_owned(), stats))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{CommandStats, parse_command_stats};

    #[test]
    fn every_command_line_is_read_and_other_lines_are_skipped() {
        let info = "# Commandstats\r\n\
            cmdstat_subscribe:calls=3,usec=7,usec_per_call=2.33,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|kill:calls=1,usec=12,usec_per_call=12.00\r\n\
            cmdstat_broken:usec=oops\r\n\
            used_cpu_sys:1.5\r\n";
        let stats = parse_command_stats(info);
        assert_eq!(stats.len(), 3, "{stats:?}");
        assert_eq!(
            stats["subscribe"],
            CommandStats {
                calls: 3,
                usec: 7.0
            }
        );
        assert_eq!(stats["client|kill"].calls, 1);
        assert_eq!(stats["broken"], CommandStats::default());
    }
}
