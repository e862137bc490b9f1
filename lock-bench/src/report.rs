//! The report: every figure (`report.json`), tables with the targets (`report.md`) and a
//! chart (`report.svg`). A target that is missed is listed as missed, with its figure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::scenarios::Results;

mod context;
mod targets;

use context::context;
use targets::{Target, targets};

/// Every scenario's results, by scenario.
type All = BTreeMap<String, Results>;

fn machine() -> serde_json::Value {
    use procfs::{CpuInfo, Current, Meminfo};
    let cpu = CpuInfo::current()
        .ok()
        .and_then(|info| info.model_name(0).map(str::to_owned))
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let memory = Meminfo::current().map_or_else(
        |_| String::new(),
        |info| format!("MemTotal: {} kB", info.mem_total / 1024),
    );
    json!({ "cpu": cpu, "cores": cores, "memory": memory, "os": std::env::consts::OS })
}

/// Writes the three files into `dir`; returns a short summary for the terminal.
pub(crate) fn write(dir: &Path, quick: bool, all: &All) -> std::io::Result<String> {
    std::fs::create_dir_all(dir)?;
    let targets = targets(all);
    let report = json!({
        "machine": machine(),
        "quick": quick,
        "scenarios": all,
        "targets": targets.iter().map(|t| json!({
            "name": t.name, "target": t.wanted, "measured": t.measured, "met": t.met,
        })).collect::<Vec<_>>(),
        "beside_the_targets": context(all).iter().filter_map(|(name, value)| {
            value.map(|v| json!({ "name": name, "measured": (v * 1000.0).round() / 1000.0 }))
        }).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    std::fs::write(
        dir.join("report.md"),
        markdown(quick, all, &targets, &report["machine"]),
    )?;
    std::fs::write(dir.join("report.svg"), svg(all))?;
    let met = targets.iter().filter(|t| t.met).count();
    Ok(format!(
        "lock-bench: {met} of {} targets met; wrote {}/report.{{json,md,svg}}",
        targets.len(),
        dir.display()
    ))
}

fn markdown(quick: bool, all: &All, targets: &[Target], machine: &serde_json::Value) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Benchmark report{}\n",
        if quick { " (quick)" } else { "" }
    );
    let _ = writeln!(
        md,
        "Machine: {} ({} cores), {}; local redis-server processes started by the run.\n",
        machine["cpu"].as_str().unwrap_or("?"),
        machine["cores"],
        machine["memory"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        md,
        "## Targets\n\n| target | wanted | measured | met |\n|---|---|---|---|"
    );
    for t in targets {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            t.name,
            t.wanted,
            t.measured,
            if t.met { "yes" } else { "**no**" }
        );
    }
    let context: Vec<_> = context(all)
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name, v)))
        .collect();
    if !context.is_empty() {
        let _ = writeln!(
            md,
            "\nBeside the targets (not targets: what a miss is measured against):\n\n\
             | ratio | measured |\n|---|---|"
        );
        for (name, value) in context {
            let _ = writeln!(md, "| {name} | {value:.3} |");
        }
    }
    for (scenario, results) in all {
        let metrics: Vec<&String> = results
            .values()
            .flat_map(BTreeMap::keys)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let _ = writeln!(md, "\n## {scenario}\n");
        let _ = write!(md, "| contender |");
        for m in &metrics {
            let _ = write!(md, " {m} |");
        }
        let _ = write!(md, "\n|---|");
        for _ in &metrics {
            let _ = write!(md, "---|");
        }
        let _ = writeln!(md);
        for (contender, figures) in results {
            let _ = write!(md, "| {contender} |");
            for m in &metrics {
                match figures.get(*m) {
                    Some(v) => {
                        let _ = write!(md, " {v} |");
                    }
                    None => {
                        let _ = write!(md, " |");
                    }
                }
            }
            let _ = writeln!(md);
        }
    }
    md
}

/// Bars: uncontended throughput, and contended wait p50/p99 per contender.
fn svg(all: &All) -> String {
    let mut bars: Vec<(String, f64, &str)> = Vec::new();
    if let Some(results) = all.get("uncontended") {
        for (contender, figures) in results {
            if let Some(v) = figures.get("pairs_per_s") {
                bars.push((format!("uncontended {contender} (pairs/s)"), *v, "#4c78a8"));
            }
        }
    }
    if let Some(results) = all.get("contended") {
        for (contender, figures) in results {
            for (metric, colour) in [("wait_ms_p50", "#72b7b2"), ("wait_ms_p99", "#e45756")] {
                if let Some(v) = figures.get(metric) {
                    bars.push((format!("contended {contender} {metric}"), *v, colour));
                }
            }
        }
    }
    let width = 900.0;
    let row = 26.0;
    let height = row * bars.len() as f64 + 40.0;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"10\" y=\"20\" font-size=\"14\">\
         lock-bench: throughput (blue, per group max) and contended waits in ms (teal p50, red p99)</text>\n"
    );
    // Each group is scaled to its own maximum: pairs/s and milliseconds do not share a unit.
    let max_of = |prefix: &str| {
        bars.iter()
            .filter(|b| b.0.starts_with(prefix))
            .map(|b| b.1)
            .fold(0.0_f64, f64::max)
            .max(f64::MIN_POSITIVE)
    };
    let (max_u, max_c) = (max_of("uncontended"), max_of("contended"));
    for (i, (label, value, colour)) in bars.iter().enumerate() {
        let y = 34.0 + row * i as f64;
        let max = if label.starts_with("uncontended") {
            max_u
        } else {
            max_c
        };
        let w = (value / max) * 420.0;
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"{:.0}\">{}</text><rect x=\"380\" y=\"{:.0}\" width=\"{w:.1}\" \
             height=\"18\" fill=\"{colour}\"/><text x=\"{:.0}\" y=\"{:.0}\">{value}</text>",
            y + 13.0,
            escape(label),
            y,
            385.0 + w,
            y + 13.0
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
