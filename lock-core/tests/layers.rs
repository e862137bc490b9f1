//! lock-core's modules form layers: no module uses one that uses it back, directly or
//! through others (the crate docs list the layers). This test reads the sources, builds
//! the graph of `crate::` paths between modules, and fails with the first circle it
//! finds, which names the modules in it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::rust_files;

/// Module path -> the modules its code (not its comments, not its tests) names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// `locks/acquire.rs` -> `locks::acquire`; `client/mod.rs` -> `client`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The code of a file: comment lines dropped, and everything from its test module on.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path named after `crate::`, brace lists of `use crate::...::{...}` expanded.
fn crate_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let prefix = path.trim_end_matches(':').to_owned();
        let after = &rest[path.len()..];
        if (path.ends_with("::") || path.is_empty())
            && let Some(list) = after.strip_prefix('{')
        {
            let list = list.split('}').next().unwrap_or_default();
            for item in list.split([',', '{', '}']) {
                let item = item.split_whitespace().next().unwrap_or_default();
                if !item.is_empty() && item != "self" {
                    let joined = if prefix.is_empty() {
                        item.to_owned()
                    } else {
                        format!("{prefix}::{item}")
                    };
                    paths.push(joined);
                }
            }
        }
        if !prefix.is_empty() {
            paths.push(prefix);
        }
    }
    paths
}

/// Names the crate root re-exports, with the module each comes from.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in code_of(lib).split(';') {
        let Some(used) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        if let Some((module, list)) = used.split_once("::{") {
            for name in list.trim_end_matches('}').split(',') {
                let name = name.trim();
                if !name.is_empty() {
                    names.insert(name.to_owned(), module.to_owned());
                }
            }
        } else if let Some((module, name)) = used.rsplit_once("::") {
            names.insert(name.to_owned(), module.to_owned());
        }
    }
    names
}

/// The module a path lies in: its longest prefix that is a module, else the module a
/// crate-root re-export comes from.
fn resolve(
    path: &str,
    modules: &BTreeSet<String>,
    reexported: &BTreeMap<String, String>,
) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
        .or_else(|| {
            let module = reexported.get(parts[0])?;
            (1..=module.split("::").count())
                .rev()
                .map(|n| module.split("::").take(n).collect::<Vec<_>>().join("::"))
                .find(|candidate| modules.contains(candidate))
        })
}

fn graph_of_sources() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let reexported = reexports(&lib);
    let files: Vec<(String, PathBuf)> = files
        .into_iter()
        .filter(|file| file != &src.join("lib.rs"))
        .map(|file| (module_of(&src, &file), file))
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|(module, _)| module.clone()).collect();
    let mut graph = Graph::new();
    for (module, file) in &files {
        let code = code_of(&std::fs::read_to_string(file).expect("read a source file"));
        let used = crate_paths(&code)
            .iter()
            .filter_map(|path| resolve(path, &modules, &reexported))
            // A module naming itself, or its own parent (the folder's `mod.rs` declares
            // it), is no dependency.
            .filter(|used| used != module && !module.starts_with(&format!("{used}::")))
            .collect();
        graph.insert(module.clone(), used);
    }
    graph
}

/// A circle of modules, if the graph has one.
fn circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|on| on == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, done, path) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_modules_form_layers_without_a_circle() {
    let graph = graph_of_sources();
    assert!(graph.len() > 20, "found only {:?}", graph.keys());
    assert!(
        graph["client::shared"].contains("background::watchdog"),
        "the reader lost the client's state's use of the watchdog: {:?}",
        graph["client::shared"]
    );
    if let Some(found) = circle(&graph) {
        panic!("modules use each other: {}", found.join(" -> "));
    }
}

#[test]
fn a_circle_is_found_and_named() {
    let mut graph = Graph::new();
    let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")];
    for (from, to) in edges {
        graph
            .entry(from.to_owned())
            .or_default()
            .insert(to.to_owned());
    }
    graph.entry("c".to_owned()).or_default();
    let found = circle(&graph).expect("a -> b -> c -> a");
    assert_eq!(found, ["a", "b", "c", "a"]);
    graph.get_mut("c").expect("c").clear();
    assert_eq!(circle(&graph), None);
}

#[test]
fn paths_in_use_lists_resolve_to_their_modules() {
    let code = "use crate::client::{named::Named, shared::Inner};\nuse crate::{Error, events};";
    let paths = crate_paths(code);
    for wanted in [
        "client::named::Named",
        "client::shared::Inner",
        "Error",
        "events",
    ] {
        assert!(
            paths.iter().any(|p| p == wanted),
            "{wanted} not in {paths:?}"
        );
    }
}
